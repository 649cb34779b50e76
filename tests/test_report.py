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


def test_nine_studies_registered():
    assert len(REPORTS) == 9


@pytest.mark.parametrize("name", list(REPORTS))
def test_report_written_with_figure_and_comparison(reports, name):
    r = reports[name]
    text = (r.out / "report.md").read_text()
    assert text.startswith("# ")
    assert r.figures and all((r.out / f).stat().st_size > 10_000 for f in r.figures)
    assert f"]({r.figures[0]})" in text  # the figure is linked from the report
    assert r.tables and all((r.out / f"{t}.csv").exists() for t in r.tables)
    # the figure it reproduces, or (serving) the published deployments it is checked against
    assert any(paper in text for paper in ("Kundu", "Korthikanti", "Guo", "SGLang"))
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
    assert "A100 -> B200" in whats and "GB200" in whats
    assert "MLPerf" not in whats  # held out: the maintainers score the model on MLPerf results
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


def test_software_assumptions_are_framework_presets(reports):
    """Comparisons run under the preset of the framework that produced the published number."""
    import inspect

    from dse.reports import module
    for name in REPORTS:  # no software setting is set by hand to mimic a framework
        src = inspect.getsource(module(name))
        for setting in ("flash_attention=", "tp_overlap=", "dp_overlap=", "moe_imbalance=", "gqa_kv_sharing="):
            assert setting not in src, (name, setting)
    assert "`megatron-lm`" in (reports["memory-recompute"].out / "report.md").read_text()
    claims = {c.what: c for c in reports["gpu-generations"].comparisons if "measured link" not in c.what
              and "product of" not in c.what}
    assert len(claims) == 7
    for c in claims.values():  # NVIDIA's own claims: NeMo; the seed paper's simulation: default
        assert c.note.startswith("preset default" if "Kundu" in c.source else "preset nemo"), c.what


def test_mappings_come_from_dse_space():
    from dse.reports import common
    assert not hasattr(common, "grid") and not hasattr(common, "divisors")
    frame = common.space_frame("t", {"model": "gpt3-175b", "gpus": 64}, {
        "tp": {"divisors_of": [8, "heads"]}, "pp": {"divisors_of": "layers"}, "dp": {"derive": "gpus / (tp * pp)"}})
    assert len(frame) and ((frame["tp"] * frame["pp"] * frame["dp"]) == 64).all() and (96 % frame["pp"] == 0).all()


def test_report_catalog_tables_carry_sources():
    from importlib import resources

    import pandas as pd
    files = [f for f in resources.files("dse.catalog").iterdir() if f.name.startswith("report_")]
    assert len(files) >= 3
    for f in files:
        with f.open() as fh:
            t = pd.read_csv(fh)
        assert "source" in t and t["source"].notna().all() and (t["source"].str.len() > 20).all(), f.name


def test_tech_scaling_anchors_and_trend(reports):
    r = reports["tech-scaling"]
    peaks = [c for c in r.comparisons if "peak BF16" in c.what]
    assert sorted(c.published for c in peaks) == [312.0, 989.0]  # A100 / H100 datasheet peaks
    assert all(abs(c.error_pct) <= 15.0 for c in peaks)
    train = r.tables["training"]
    assert train["node"].tolist()[0] == "n12" and train["node"].tolist()[-1] == "a10"
    assert (train["step_time_s"].diff().dropna() < 0).all()  # every node generation trains faster


def test_chiplet_cost_anchors_and_yield(reports):
    r = reports["chiplet-cost"]
    prices = sorted(c.published for c in r.comparisons if "price" in c.what)
    assert prices == [30000.0, 40000.0]  # systems.csv price estimates of H100 and B200
    designs = r.tables["designs"]
    for _, g in designs.groupby(["node", "total_area_mm2"]):  # smaller dies yield better
        g = g.sort_values("compute_dies")
        assert (g["die_yield"].diff().dropna() > 0).all()


def test_figures_sized_for_the_gallery(reports):
    """Every report figure is ~900 px wide in the house style, so at the README gallery's ~440 px
    its smallest text (dse.plotstyle.MIN_FONT_PT) is still ~9 px."""
    import matplotlib.image as mpimg

    from dse import plotstyle
    assert plotstyle.WIDTH_IN * plotstyle.DPI <= 950
    assert plotstyle.MIN_FONT_PT * plotstyle.DPI / 72 * 440 / (plotstyle.WIDTH_IN * plotstyle.DPI) >= 9.0
    sizes = [v for k, v in plotstyle.RC.items() if k.endswith(("font.size", "titlesize", "labelsize", "legend.fontsize"))]
    assert min(sizes) >= plotstyle.MIN_FONT_PT
    for r in reports.values():
        for f in r.figures:
            assert mpimg.imread(r.out / f).shape[1] == round(plotstyle.WIDTH_IN * plotstyle.DPI), (r.name, f)
    assert "GiB)" in (reports["memory-recompute"].out / "report.md").read_text()
