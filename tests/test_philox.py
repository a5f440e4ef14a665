"""The CPU Philox port equals Triton's tl.randint bit for bit (docs/design.md §4), and the SR counter
layout of quant/philox.py separates every field."""
import torch
import triton
import triton.language as tl
from precision_lab.quant import philox


def test_known_answer_of_tl_randint():
    assert philox.randint(1234, torch.arange(4)).tolist() == [546353992, 2666454581, 1070188760, 3055983166]


@triton.jit
def _randint_kernel(out_ptr, off_ptr, seed, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    off = tl.load(off_ptr + i, mask=m, other=0)
    tl.store(out_ptr + i, tl.randint(seed, off).to(tl.int64, bitcast=False) & 0xFFFFFFFF, mask=m)


def test_cpu_port_equals_tl_randint_on_64bit_counters_and_seeds(device):
    g = torch.Generator().manual_seed(0)
    offsets = torch.randint(-(2**62), 2**62, (300,), generator=g, dtype=torch.int64)
    offsets[:3] = torch.tensor([0, 1, -(2**63)])  # incl. the read-copy bit (bit 63)
    for seed in (0, 1234, philox.layer_seed(7, 3), philox.layer_seed(2**32 - 1, 2**31)):
        out = torch.empty(300, dtype=torch.int64, device=device)
        _randint_kernel[(3,)](out, offsets.to(device), seed, 300, BLOCK=128)
        assert torch.equal(out.cpu(), philox.randint(seed, offsets)), seed


def test_counter_layout_fields_do_not_collide():
    offs = philox.sr_offsets(torch.tensor([0, 1]).view(2, 1, 1), torch.tensor([0, 1]).view(1, 2, 1),
                             torch.tensor([0, 1]).view(1, 1, 2), 8)
    assert offs.unique().numel() == offs.numel() == 2 * 2 * 2 * 8
    read = philox.sr_offsets(0, 0, 0, 8, copy=philox.COPY_READ)
    assert (read < 0).all()  # bit 63 set
    assert set(read.tolist()).isdisjoint(philox.sr_offsets(0, 0, 0, 8).tolist())


def test_state_rbits_shape_and_determinism():
    a = philox.state_rbits(5, 2, torch.arange(3).view(3, 1), torch.arange(4).view(1, 4), 1, (6, 10))
    b = philox.state_rbits(5, 2, torch.arange(3).view(3, 1), torch.arange(4).view(1, 4), 1, (6, 10))
    assert a.shape == (3, 4, 6, 10) and torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 2**32
    c = philox.state_rbits(6, 2, torch.arange(3).view(3, 1), torch.arange(4).view(1, 4), 1, (6, 10))
    assert not torch.equal(a, c)


def test_layout_range_errors():
    import pytest

    with pytest.raises(ValueError, match="head"):
        philox.sr_offsets(0, 1 << philox.HEAD_BITS, 0, 4)
    with pytest.raises(ValueError, match="elements"):
        philox.sr_offsets(0, 0, 0, (1 << philox.ELEMENT_BITS) + 1)
    with pytest.raises(ValueError, match="seed"):
        philox.layer_seed(-1, 0)
