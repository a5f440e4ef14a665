"""Device side of the overlapped two-launch step (programmatic dependent launch; the host rule is
``launch.overlap_scores_launch``). With ``PDL`` False both helpers compile to nothing, which is also
what the Triton interpreter runs."""
import triton
import triton.language as tl


@triton.jit
def release_dependents(PDL: tl.constexpr):
    """Scores kernel: let the step kernel launched after it start now (its programs wait in
    ``await_scores`` for what this kernel writes)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def await_scores(PDL: tl.constexpr):
    """Step kernel: block until the scores kernel before it has finished and its writes are visible.
    Called right before the first read of anything it writes."""
    if PDL:
        tl.extra.cuda.gdc_wait()
