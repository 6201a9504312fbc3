"""A run's cost ledger as every report format, `a2rl show`, the viewer and `a2rl compare`
show it: the stored row (`a2rl.store.ledger`) read as the report's section, its lines in
words, and the gains per GPU-hour and per dollar. Pure but for `ledger_section`."""

from __future__ import annotations

from a2rl.store import Store, ledger

from .fmt import dur
from .schema import LedgerSection


def ledger_section(store: Store, run_id: str) -> LedgerSection | None:
    """The run's stored ledger as the report's section; None where none is stored."""
    row = ledger.stored(store, run_id)
    if row is None:
        return None
    return LedgerSection.model_validate(row.model_dump(include=set(LedgerSection.model_fields)))


def size(n: int | None) -> str:
    """Bytes in binary units, one decimal ("1.5 GiB"); "–" when unknown."""
    if n is None:
        return "–"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} GiB"  # pragma: no cover - the loop returns


def cost_text(s: LedgerSection) -> str:
    if s.cost_usd is None:
        return f"unknown ({s.cost_note})" if s.cost_note else "unknown"
    return f"${s.cost_usd:.4f} ({s.cost_basis}: {s.cost_note})" if s.cost_note else (
        f"${s.cost_usd:.4f} ({s.cost_basis})")


def ledger_rows(s: LedgerSection | None) -> list[tuple[str, str]]:
    """(label, value) lines, as `a2rl show`, the Markdown report and the pages print them."""
    if s is None:
        return [("ledger", "none stored (the run is not finished, or finished before "
                           "a2rl kept ledgers)")]
    tokens = ("–" if s.input_tokens is None else
              f"{s.input_tokens:,} in ({s.cached_tokens or 0:,} cached), "
              f"{s.output_tokens or 0:,} out" + (f" [{s.usage_source}]" if s.usage_source
                                                 else ""))
    gpu = ("not measured" if s.gpu_s is None else
           f"{s.gpu_s / 3600:.3f} GPU-hours, peak {size(s.gpu_memory_peak_bytes)}")
    cpu = "not measured" if s.jobs_cpu_s is None else f"{s.jobs_cpu_s:.1f} CPU-seconds"
    return [("driver tokens", tokens), ("driver cost", cost_text(s)),
            ("jobs", f"{s.jobs}: {cpu}, peak memory {size(s.jobs_memory_peak_bytes)}"),
            ("GPU", gpu),
            ("grading", f"{dur(s.grading_s)} over {s.evaluations} evaluations"),
            ("submission checks", f"{s.validations}: " + (
                "not measured" if s.validation_cpu_s is None
                else f"{s.validation_cpu_s:.1f} CPU-seconds"))]


def gpu_hours(s: LedgerSection | None) -> float | None:
    return None if s is None or s.gpu_s is None else s.gpu_s / 3600


def gain_per(improvement: float | None, amount: float | None) -> float | None:
    """The improvement per unit spent (GPU-hour, dollar); None where either is unknown or
    nothing was spent (a gain per zero is no figure)."""
    if improvement is None or amount is None or amount <= 0:
        return None
    return improvement / amount
