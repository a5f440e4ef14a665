"""StatePolicy: parsing, canonical names, validation errors (docs/design.md §6)."""
import pytest

from precision_lab import StatePolicy


@pytest.mark.parametrize(
    "text, mode, update, read, L",
    [
        ("fp32", "fp32", "fp32", "fp32", 16),
        ("conventional:fp16-sr", "conventional", "fp16-sr", "fp16-sr", 16),
        ("shared:nvfp4-sr", "shared", "nvfp4-sr", "nvfp4-sr", 16),
        ("split:fp32/nvfp4", "split", "fp32", "nvfp4", 16),
        ("split:fp16-sr/nvfp4@L16", "split", "fp16-sr", "nvfp4", 16),
        ("shared:nvfp4@L8", "shared", "nvfp4", "nvfp4", 8),
        ("split:fp32/tests.custom_quantizers:HalfQuantizer", "split", "fp32", "tests.custom_quantizers:HalfQuantizer", 16),
    ],
)
def test_parse_fields(text, mode, update, read, L):
    p = StatePolicy.parse(text)
    assert (p.mode, p.update, p.read, p.buffer_len) == (mode, update, read, L)


@pytest.mark.parametrize(
    "text",
    ["fp32", "conventional:fp16-sr", "shared:nvfp4-sr", "split:fp32/nvfp4", "split:fp16-sr/nvfp4@L32",
     "split:fp8e4m3-sr/nvfp4@fold=buffered", "shared:bf16@L4"],
)
def test_short_str_round_trips(text):
    p = StatePolicy.parse(text)
    assert StatePolicy.parse(p.short_str()) == p
    assert p.short_str() == text


def test_default_L_is_left_out_of_the_name():
    assert StatePolicy.parse("split:fp16-sr/nvfp4@L16").short_str() == "split:fp16-sr/nvfp4"


def test_file_stem_is_path_safe():
    stem = StatePolicy.parse("split:fp16-sr/nvfp4@L8").file_stem()
    assert not set(stem) & set(":/@= ")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("turbo:nvfp4", "unknown mode"),
        ("shared", "needs a format"),
        ("split:nvfp4", "UPDATE/READ"),
        ("shared:nvfp4@L0", ">= 1"),
        ("shared:nvfp4@X3", "unknown option"),
        ("fp32:nvfp4", "takes no format"),
        ("split:fp32/nvfp4@fold=sometimes", "gdn_fold"),
    ],
)
def test_parse_errors_are_clear(text, message):
    with pytest.raises(ValueError, match=message) as e:
        StatePolicy.parse(text)
    if text:  # every error names the policy it is about, once
        assert str(e.value).startswith(f"policy {text!r}: ") and str(e.value).count(f"policy {text!r}") == 1


def test_one_copy_modes_reject_two_formats():
    with pytest.raises(ValueError, match="must match"):
        StatePolicy("shared", update="fp32", read="nvfp4")


def test_validate_rejects_L_smaller_than_drafts_plus_one():
    with pytest.raises(ValueError, match="1 \\+ drafts"):
        StatePolicy.parse("shared:fp32@L4").validate(drafts=4)
    StatePolicy.parse("shared:fp32@L5").validate(drafts=4)


def test_validate_rejects_unknown_format_listing_known_ones():
    with pytest.raises(ValueError, match="Known formats"):
        StatePolicy.parse("shared:nvfp5").validate()


def test_validate_rejects_a_custom_quantizer_that_fails_its_own_fake():
    with pytest.raises(ValueError, match="failed on a probe"):
        StatePolicy.parse("split:fp32/tests.custom_quantizers:BrokenQuantizer").validate()
    with pytest.raises(ValueError, match="non-finite"):
        StatePolicy.parse("split:fp32/tests.custom_quantizers:NaNQuantizer").validate()


def test_validate_accepts_a_fake_only_custom_quantizer():
    StatePolicy.parse("split:fp32/tests.custom_quantizers:HalfQuantizer").validate()


def test_validate_accepts_stochastic_formats():
    # SR quantizers refuse to run without random bits; validate() must supply them
    StatePolicy.parse("split:fp16-sr/nvfp4-sr").validate()
    StatePolicy.parse("conventional:bf16-sr").validate()
