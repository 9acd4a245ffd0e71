"""One rule maps a measured table's GPU name to the shipped profile of its node."""

import pytest

from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.validation.gpu_profiles import FAMILY_PROFILES, PCIE_PROFILES, profile_for_gpu, require_profile


@pytest.mark.parametrize("name, profile", [
    ("H100-SXM5-80GB", "h100-sxm-nvswitch"), ("H100-SXM-80GB", "h100-sxm-nvswitch"), ("H100", "h100-sxm-nvswitch"),
    ("H200-SXM-141GB", "h200-sxm-nvswitch"), ("H200", "h200-sxm-nvswitch"),
    ("A100-SXM4-80GB", "a100-sxm-nvswitch"), ("A100-80GB", "a100-sxm-nvswitch"),
    ("A100-SXM-80GB (330W cap)", "a100-sxm-nvswitch"), ("A100-PCIE-40GB", "a100-pcie"),
    ("B200", "b200-sxm-nvswitch"), ("GH200-480GB", "gh200-480gb"), ("L40S", "l40s-pcie"), ("l40s", "l40s-pcie")])
def test_each_table_spelling_maps_to_its_node(name, profile):
    assert profile_for_gpu(name) == profile


def test_a_gpu_without_a_profile_is_one_line_naming_the_field():
    assert profile_for_gpu("H100-PCIe-80GB") is None and profile_for_gpu("MI300X") is None
    with pytest.raises(UserInputError, match=r"^gpu 'MI300X' has no shipped profile; allowed: GH200, H200, H100"):
        require_profile("MI300X", "gpu")


def test_every_mapped_profile_ships():
    for name in {*FAMILY_PROFILES.values(), *PCIE_PROFILES.values()}:
        assert load_profile(name).name == name
