"""laddersim calibrate nccl-log: NCCL's own tuning table and ring transports read from its debug
log, its choice per message size reproduced, beside laddersim's."""

from __future__ import annotations

import pytest

from laddersim.measure.nccl_log import choice_rows, nccl_choice, nccl_time_us, parse_log, read_logs
from laddersim.cli import main
from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile

# NCCL's algorithm and protocol names and order (src/graph/tuning.cc ncclAlgoStr / ncclProtoStr)
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
PREFIX = "node7:1234:1234 [0] NCCL INFO "


def tuning_table(values: dict) -> list[str]:
    """The table as ncclTopoTuneModel prints it (../shared/reference_data/p2p_off_pcie/raw/
    nccl_tuning_cc_HEAD.cc lines 543-583, the same printf formats): ``values[(algo, proto)] =
    (latency us, bandwidth GB/s)`` for AllReduce, 0/0 elsewhere."""
    lines = []
    for block in range(0, len(ALGOS), 3):
        algos = ALGOS[block:block + 3]
        lines.append("  Algorithm   |" + "".join(" %14s   %14s   %14s |" % ("", a, "") for a in algos))
        lines.append("  Protocol    |" + "".join(" %14s |" % p for _ in range(3) for p in PROTOS))
        lines.append(" Max NThreads |" + "".join(" %14d |" % 512 for _ in algos for _ in PROTOS))
        for func in FUNCS:
            cells = "".join("%8.1f/%6.1f |" % (values.get((a, p), (0.0, 0.0)) if func == "AllReduce" else (0.0, 0.0))
                            for a in algos for p in PROTOS)
            lines.append("%13s |" % func + cells)
    return [PREFIX + line for line in lines]


# An 8-GPU node with P2P disabled as NCCL would cost it: rings through host memory (SHM hops),
# NVLS through the switch (algorithm bandwidths: busbw x n / 2(n-1)).
SHM_8 = {("Ring", "LL"): (20.6, 3.4), ("Ring", "Simple"): (88.2, 6.9), ("Tree", "LL"): (20.8, 1.6),
         ("Tree", "Simple"): (88.2, 5.3), ("NVLS", "Simple"): (25.0, 258.4)}


def p2p_off_log(ranks: int = 8, channels: int = 16) -> str:
    """One communicator's initialisation in NCCL's order: the comm line, the ring hops' transports,
    the tuning table, then the channel counts and Init COMPLETE."""
    comm = [PREFIX + f"comm 0x5581 rank 0 nRanks {ranks} nNodes 1 localRanks {ranks} localRank 0 MNNVL 0"]
    hops = [PREFIX + f"Channel 0{c}/0 : 0[0] -> 1[1] via SHM/direct/direct" for c in range(2)]
    tail = [PREFIX + "threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
            PREFIX + f"{channels} coll channels, {channels} collnet channels, 16 nvls channels, 16 p2p channels, "
                     "2 p2p channels per peer", "unrelated line", PREFIX + "ncclCommInitRank comm 0x5581 Init COMPLETE"]
    return "\n".join(comm + hops + tuning_table(SHM_8) + tail) + "\n"


def test_the_table_is_read_as_nccl_prints_it():
    (table,) = parse_log(p2p_off_log())
    assert (table.ranks, table.nodes, table.channels) == (8, 1, 16)
    assert table.transports == {"shm": 2}
    assert table.entries[("AllReduce", "ring", "ll")] == (20.6, 3.4)
    assert table.entries[("AllReduce", "nvls", "simple")] == (25.0, 258.4)
    assert table.entries[("AllReduce", "pat", "simple")] == (0.0, 0.0)
    assert len([k for k in table.entries if k[0] == "AllReduce"]) == 21  # 7 algorithms x 3 protocols


def test_nccl_choice_is_the_least_estimate():
    (table,) = parse_log(p2p_off_log())
    # ring LL: 20.6 + n / 3400 us; NVLS: 25.0 + n / 258400 us: NVLS from ~15.2 KB
    assert nccl_choice(table, 8192)[:2] == ("ring", "ll")
    assert nccl_choice(table, 16384)[:2] == ("nvls", "simple")
    assert nccl_choice(table, 8192)[2] == pytest.approx(20.6 + 8192 / 3400.0)
    # a disabled entry (bandwidth 0) is never picked; Tree's bandwidth takes NCCL's medium-size correction
    assert nccl_time_us(table, "pat", "simple", 4096) is None
    # (64 KiB >> 6 = 2^10: treeCorrectionFactor[LL][10] = 0.6)
    assert nccl_time_us(table, "tree", "ll", 65536) == pytest.approx(20.8 + 65536 / (1000 * 1.6 * 0.6))


def test_hop_lines_of_older_and_newer_nccl():
    """NCCL 2.19+ prints 'Channel 00/0 : 0[0] -> 1[1] via ...', older versions 'Channel 00 : 0[1c000]
    -> 1[1d000] via ...'; network hops carry [send]/[receive]."""
    lines = [PREFIX + "Channel 00 : 0[1c000] -> 1[1d000] via P2P/IPC/read",
             PREFIX + "Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA",
             PREFIX + "Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
             PREFIX + "Channel 02/0 : 3[3] -> 4[4] via SHM/direct/direct"]
    (table,) = parse_log(p2p_off_log() + "\n".join(lines) + "\n")  # printed after it: the same communicator
    assert table.transports == {"shm": 3, "p2p": 1, "net": 2}


def test_two_communicators_in_one_log_are_two_tables():
    tables = parse_log(p2p_off_log(8, channels=16) + p2p_off_log(4, channels=4))
    assert [(t.ranks, t.channels, t.transports["shm"]) for t in tables] == [(8, 16, 2), (4, 4, 2)]


def test_cli_lists_nccls_choice_beside_laddersims(tmp_path, capsys):
    log = tmp_path / "nccl.node7.1234.log"
    log.write_text(p2p_off_log())
    out = tmp_path / "choices.csv"
    assert main(["calibrate", "nccl-log", str(log), "--hardware", "h100-sxm-p2p-off", "--max-size", "1048576",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "8 ranks, 1 node, 16 channels; ring hops: shm 2" in text
    import pandas as pd

    frame = pd.read_csv(out)
    assert list(frame["size_bytes"]) == [1024 << i for i in range(11)]
    assert set(frame["nccl"]) == {"ring/ll", "nvls/simple"}
    # laddersim's P2P-off transport picks the same at these sizes (its tuner's estimates, fitted
    # to where the authors' paired runs leave the SHM ring)
    assert frame["agrees"].all()


def test_bad_logs_are_one_line_errors(tmp_path, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text(PREFIX + "NCCL version 2.21.5+cuda12.4\n")
    assert main(["calibrate", "nccl-log", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "NCCL_DEBUG_SUBSYS=INIT,TUNING" in err
    assert main(["calibrate", "nccl-log", str(tmp_path / "missing.log")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(UserInputError):
        read_logs([empty])


def test_choice_rows_without_a_profile_have_no_laddersim_column():
    frame = choice_rows(parse_log(p2p_off_log()), 4096, None)
    assert list(frame.columns) == ["table", "communicator", "size_bytes", "nccl", "nccl_estimate_us"]
    assert load_profile("h100-sxm-p2p-off").collectives.transport is not None


def _with_tuning(profile, entries):
    from laddersim.hardware.transport_spec import NcclTuningEntry

    transport = profile.collectives.transport.model_copy(
        update={"nccl_tuning": [NcclTuningEntry(**e) for e in entries]})
    return profile.model_copy(update={"collectives": profile.collectives.model_copy(update={"transport": transport})})


def test_a_profile_stating_nccls_table_picks_by_it(tmp_path, capsys):
    """--yaml prints the profile entries; a profile stating them picks (algorithm, protocol) by
    NCCL's own estimates for that GPU count, and keeps its inferred tuner for the others."""
    import yaml

    from laddersim.costs.allreduce import allreduce_time_s
    from laddersim.costs.collectives import collective_choice
    from laddersim.costs.transport import shm_candidates_s

    log = tmp_path / "nccl.log"
    # the machine's NCCL believes NVLS dear (200 us): it stays on the SHM ring, LL then Simple
    log.write_text(p2p_off_log().replace("    25.0/ 258.4", "   200.0/ 258.4"))
    assert main(["calibrate", "nccl-log", str(log), "--yaml"]) == 0
    entries = yaml.safe_load(capsys.readouterr().out)["nccl_tuning"]
    assert {(e["algorithm"], e["protocol"]) for e in entries} == {("ring", "ll"), ("ring", "simple"), ("tree", "ll"),
                                                                  ("tree", "simple"), ("nvls", "simple")}
    assert all(e["gpus"] == 8 and "nccl.log" in e["source"] for e in entries)
    base = load_profile("h100-sxm-p2p-off")
    told = _with_tuning(base, entries)
    assert collective_choice(base, 8, 65536.0) == ("nvls", "simple")
    assert collective_choice(told, 8, 65536.0) == ("ring", "ll")  # 20.6 + n/3400 < 88.2 + n/6900 < 200 + ...
    assert collective_choice(told, 8, 655360.0) == ("ring", "simple")  # 183 us against LL 213, NVLS 202
    assert collective_choice(told, 8, 4.0 * 2**20) == ("nvls", "simple")  # 216 us against Simple 696
    # the time is what the picked candidate really takes (the SHM ring's LL), not NCCL's estimate
    ring_ll_s = float(shm_candidates_s(base, 8, 65536.0)[("ring", "ll")])
    assert float(allreduce_time_s(told, 8, 65536.0)) == pytest.approx(ring_ll_s)
    assert float(allreduce_time_s(base, 8, 65536.0)) != pytest.approx(ring_ll_s)
    assert collective_choice(told, 4, 65536.0) == collective_choice(base, 4, 65536.0)  # no 4-GPU table stated


def test_a_log_without_the_comm_line_lists_nccls_picks_only(tmp_path, capsys):
    """NCCL older than 2.19 prints no 'nRanks N nNodes M': the table is read, its picks listed,
    laddersim's column needs the rank count, and --yaml refuses in one line."""
    log = tmp_path / "old.log"
    log.write_text("\n".join(line for line in p2p_off_log().splitlines() if "nRanks" not in line) + "\n")
    (table,) = read_logs([log])
    assert table.ranks is None and table.entries
    assert main(["calibrate", "nccl-log", str(log), "--hardware", "h100-sxm-p2p-off", "--max-size", "4096"]) == 0
    out = capsys.readouterr().out
    assert "ranks not printed" in out and "laddersim" not in out
    assert main(["calibrate", "nccl-log", str(log), "--yaml"]) == 2
    assert "nRanks N nNodes M" in capsys.readouterr().err
