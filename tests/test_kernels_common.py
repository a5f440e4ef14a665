"""precision_lab.kernels.common: one table of format codes for every kernel family, and the host
launch helpers the wrappers share."""
import pytest
import torch
from precision_lab.kernels import decode_state
from precision_lab.kernels.common import formats, launch
from precision_lab.kernels.quant import triton_quant


def test_every_kernel_family_reads_the_one_format_table():
    codes = {name: code for name, (code, _) in formats.KERNEL_FORMATS.items()}
    assert sorted(set(codes.values())) == [0, 1, 2, 3, 4, 5]
    # the quantizer's element casts (names without the fp8 prefix)
    cast = {"bf16": "bf16", "fp16": "fp16", "e4m3": "fp8e4m3", "e5m2": "fp8e5m2"}
    assert {k: v[0] for k, v in triton_quant._CAST_FORMATS.items()} == {k: codes[n] for k, n in cast.items()}
    # the decode pools read the same table object
    assert decode_state.KERNEL_FORMATS is formats.KERNEL_FORMATS
    assert decode_state.format_code("nvfp4-sr") == (formats.FMT_NVFP4, True)
    for name in ("FMT_FP32", "FMT_BF16", "FMT_FP16", "FMT_E4M3", "FMT_E5M2", "FMT_NVFP4"):
        assert getattr(formats, "C_" + name[4:]).value == getattr(formats, name)


@pytest.mark.parametrize("fmt,per_element", [("fp32", 4), ("bf16-sr", 2), ("fp16", 2), ("fp8e4m3", 1),
                                             ("fp8e5m2-sr", 1)])
def test_matrix_bytes_of_element_formats(fmt, per_element):
    assert formats.matrix_bytes(formats.KERNEL_FORMATS[fmt][0], 64, 128) == 64 * 128 * per_element


def test_matrix_bytes_of_nvfp4():
    # 4-bit codes, one E4M3 byte per 16 elements, one fp32 global scale per matrix
    assert formats.matrix_bytes(formats.FMT_NVFP4, 64, 128) == 64 * 128 // 2 + 64 * 128 // 16 + 4


def test_launch_helpers():
    assert [launch.pow2(n) for n in (0, 1, 2, 3, 33, 64)] == [1, 1, 2, 4, 64, 64]
    assert launch.as_i64(7, 3, "cpu").tolist() == [7, 7, 7]
    t = launch.as_i64(torch.tensor([1, 2], dtype=torch.int32), 2, "cpu")
    assert t.dtype == torch.int64 and t.tolist() == [1, 2] and t.is_contiguous()
    assert (launch.warps_for_tile(64, 128), launch.warps_for_tile(32, 128)) == (8, 4)
    with pytest.raises(ValueError, match="blocks of 16 .* 20 elements"):
        launch.check_nvfp4_cols(20, formats.FMT_FP32, formats.FMT_NVFP4)
    launch.check_nvfp4_cols(20, formats.FMT_BF16)  # element formats take any width
    launch.check_nvfp4_cols(32, formats.FMT_NVFP4)


def test_replay_scan_buffers():
    like, u0, r0 = torch.zeros(2, 3), torch.full((2, 4), 1.0), torch.full((2, 4), 2.0)
    y, u, r = launch.replay_scan_buffers(None, like, (2, 4), u0, r0, split=False, L=16)
    assert y.shape == like.shape and r is u and torch.equal(u, u0) and u is not u0  # the kernel works in a copy
    y, u, r = launch.replay_scan_buffers(None, like, (2, 4), u0, r0, split=True, L=64)
    assert torch.equal(u, u0) and torch.equal(r, r0) and r is not u
    given = (torch.empty(2, 3), torch.empty(2, 4), torch.empty(2, 4))
    assert all(a is b for a, b in zip(launch.replay_scan_buffers(given, like, (2, 4), u0, r0, split=True, L=1), given))
    with pytest.raises(ValueError, match="1 <= L <= 64, got L=65"):
        launch.replay_scan_buffers(None, like, (2, 4), u0, r0, split=False, L=65)
