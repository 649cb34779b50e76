"""dse report: every seed study runs, writes its report, figures and tables, and states its comparison
with the published figure it reproduces (heavy studies on reduced settings via quick=True)."""
from __future__ import annotations

import pytest

from dse.cli import main
from dse.reports import REPORTS, run_report


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    return {name: run_report(name, out=root / name, quick=name != "memory-recompute") for name in REPORTS}


def test_eight_studies_registered():
    assert len(REPORTS) == 8


@pytest.mark.parametrize("name", list(REPORTS))
def test_report_written_with_figure_and_comparison(reports, name):
    r = reports[name]
    text = (r.out / "report.md").read_text()
    assert text.startswith("# ")
    assert r.figures and all((r.out / f).stat().st_size > 10_000 for f in r.figures)
    assert f"]({r.figures[0]})" in text  # the figure is linked from the report
    assert r.tables and all((r.out / f"{t}.csv").exists() for t in r.tables)
    assert any(paper in text for paper in ("Kundu", "Korthikanti", "Guo"))  # the figure it reproduces
    assert r.comparisons, name
    assert "## Comparison with the published figure" in text and "error_pct" in text and "Sources: [1]" in text


def test_memory_recompute_within_five_percent_per_bar(reports):
    r = reports["memory-recompute"]
    bars = [c for c in r.comparisons if c.what.startswith(("Fig.1", "Fig.7"))]
    assert len(bars) == 28  # 8 Fig.1 activation bars, 16 Fig.7 bars, 4 model-state bars
    worst = max(bars, key=lambda c: abs(c.error_pct))
    assert abs(worst.error_pct) <= 5.0, (worst.what, worst.error_pct)


def test_gpu_generations_states_published_totals(reports):
    r = reports["gpu-generations"]
    whats = " | ".join(c.what for c in r.comparisons)
    assert "A100 -> B200" in whats and "GB200" in whats and "MLPerf" in whats
    a100_b200 = next(c for c in r.comparisons if c.what.startswith("A100 -> B200") and "MoE" in c.what)
    assert a100_b200.published == 35.0 and a100_b200.predicted > 3.0
    links = [c for c in r.comparisons if c.what.endswith("(measured link)")]
    assert len(links) >= 8  # A100->H100, H100->B200, H100->GB200, FP8->NVFP4, each on one model
    assert all(abs(c.error_pct) <= 25.0 for c in links), [(c.what, c.error_pct) for c in links]
    chain = next(c for c in r.comparisons if "product of measured links" in c.what)
    assert abs(chain.error_pct) <= 25.0 and 8.0 < chain.published < 30.0
    dec = r.tables["decomposition"]
    for (_, _), g in dec.groupby(["model", "target"]):  # factors multiply up to the total
        assert g["factor"].prod() == pytest.approx(g["cumulative_speedup"].iloc[-1], rel=1e-6)


def test_cli_unknown_study_exits_2(capsys):
    assert main(["report", "no-such-study"]) == 2
    assert "unknown study" in capsys.readouterr().err


def test_cli_runs_one_study(tmp_path, capsys):
    assert main(["report", "memory-recompute", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").exists() and (tmp_path / "memory_recompute.png").exists()
    assert "28 comparisons" in capsys.readouterr().out
