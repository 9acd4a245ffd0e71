"""What every layer may use and that knows nothing of inference: reading and writing files
(``io_read``, ``io_write``, ``config_files``), where the shipped files are (``resources``), what
made a result (``provenance``), the allowed values and ranges of inputs (``choices``, ``limits``),
memos by identity (``memo``), the garbage collector paused for bulk work (``collector``), child
processes that die with their parent (``child_lifetime``), progress bars and text tables."""
