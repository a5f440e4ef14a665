"""The scans' format codes and tile helpers under their earlier module name: the format table is
``common/formats.py`` and the tile helpers are ``common/tiles.py``; import them from there."""
from precision_lab.kernels.common.formats import (  # noqa: F401
    C_BF16,
    C_E4M3,
    C_E5M2,
    C_FP16,
    C_FP32,
    C_NVFP4,
    FMT_BF16,
    FMT_E4M3,
    FMT_E5M2,
    FMT_FP16,
    FMT_FP32,
    FMT_NVFP4,
    KERNEL_FORMATS,
)
from precision_lab.kernels.common.tiles import (  # noqa: F401
    EVENT_SHIFT,
    HEAD_SHIFT,
    SEQ_SHIFT,
    nvfp4_tile,
    nvfp4_tile_sr,
    quantize_tile,
    sr_bits,
    tile_amax_bits,
    to_output,
)
