import pytest

from course import plot


def test_gflops_plot_renders_a_png():
    figure = plot.gflops_vs_size({"yours": [1.0, 2.0], "cuBLAS": [2.0, 3.0]}, ["1024", "2048"], "t")
    assert plot.to_png(figure).startswith(b"\x89PNG")


def test_series_must_match_the_shapes():
    with pytest.raises(ValueError, match="2 shapes"):
        plot.gflops_vs_size({"yours": [1.0]}, ["a", "b"], "t")


def test_roofline_renders_a_png():
    figure = plot.roofline(50_000.0, 3_000.0, {"kernel": (16.0, 30_000.0)}, "roofline")
    assert plot.to_png(figure).startswith(b"\x89PNG")


def test_show_displays_a_figure_once_and_nothing_for_none(monkeypatch):
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    plot.show(None)
    figure = plot.gflops_vs_size({"yours": [1.0]}, ["1024"], "t")
    plot.show(figure)
    assert shown == [figure] and not plt.fignum_exists(figure.number)  # closed: the cell's end shows it no more
