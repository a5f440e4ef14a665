"""``scripts/kernel_resources.py``'s reading of compiled code (no compile needed: SASS text by hand)."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "kernel_resources", Path(__file__).resolve().parent.parent / "scripts" / "kernel_resources.py")
kernel_resources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_resources)


def _sass(*lines):
    return "\n".join(f"        /*{16 * i:04x}*/                   {t} ;   /* 0x0 */" for i, t in enumerate(lines))


def test_memory_rounds_follow_the_waits():
    rounds = kernel_resources.memory_rounds
    # slot, then the state tile at an address computed from it (one wait), then the output
    assert rounds(_sass("LDG.E R4, desc[UR4][R2.64]", "LDG.E.U16 R9, desc[UR4][R6.64]",
                        "IMAD.WIDE R10, R4, 0x4, R12", "@P0 LDG.E.128 R20, desc[UR4][R10.64]",
                        "@!P1 LDG.E.128 R24, desc[UR4][R10.64+0x10]", "FADD R30, R20, R24",
                        "STG.E desc[UR4][R14.64], R30")) == [2, 2]
    # a load written after a use of the tile goes out a round later; one that overwrote its register
    # first does not wait
    assert rounds(_sass("LDG.E.128 R20, desc[UR4][R2.64]", "FADD R30, R20, R21",
                        "LDG.E R40, desc[UR4][R6.64]", "MOV R41, 0x1", "FMUL R42, R41, R41",
                        "LDG.E R43, desc[UR4][R8.64]", "FADD R44, R40, R43")) == [1, 2]
    assert rounds(_sass("LDG.E R5, desc[UR4][R2.64]", "MOV R5, RZ", "FADD R6, R5, R5",
                        "LDG.E R7, desc[UR4][R2.64]")) == [2]
    # a store's operands are all reads: storing a loaded value waits for it
    assert rounds(_sass("LDG.E R5, desc[UR4][R2.64]", "STS [R9], R5", "LDG.E R7, desc[UR4][R2.64]")) == [1, 1]
    # copies to shared memory are waited for at DEPBAR
    assert rounds(_sass("LDGSTS.E [R95], desc[UR18][R2.64], P3", "LDGDEPBAR", "LDG.E R7, desc[UR4][R4.64]",
                        "DEPBAR.LE SB0, 0x0", "LDG.E R8, desc[UR4][R4.64]")) == [2, 1]
    assert rounds(_sass("FADD R1, R2, R3")) == []
