"""What every kernel family shares (``precision_lab.kernels.common``):

- ``formats``  the one table of storage-format codes (``FMT_*`` for the host, ``C_*`` constexprs for
  ``@triton.jit`` bodies) and ``KERNEL_FORMATS`` (quantizer name → code, stochastic rounding)
- ``philox``   stochastic-rounding bits in kernels: one ``tl.randint4x`` call per 8 elements, in the
  counter layouts of ``quant/philox.py`` (``sr_bits`` for state tiles, ``sr_bits_cols`` for a column
  block of one, ``flat_sr_bits`` for ``seed=``)
- ``tiles``    rounding an fp32 tile to a format in registers (the scans' checkpoints):
  ``quantize_tile``, NVFP4 tiles, a flush's row-block store and its late NVFP4 pass, ``to_output``
- ``state_io`` the decode kernels' packed pools: ``load_state`` / ``store_state`` / ``read_state_dot``,
  column blocks (``load_state_cols``, ``store_state_cols``, ``store_state4``), the program prologue
  ``program_slot``, ``softplus``
- ``products`` fp32 matrix products on tensor cores with the TF32 split done by hand (``dot_f32``)
- ``launch``   host-side launch helpers (powers of two, int64 counters, warps, argument checks)

Element codecs (integer bit operations) are ``precision_lab.kernels.quant.codecs``.
"""
