"""Figure builders of the embeddings page, on real records from the tiny model."""
import numpy as np

from engine.embeddings import analysis as E
from ui.embeddings.figures import (cosine_heatmap, embedding_heatmap, neighbours_bar, norms_bar, pca_scatter,
                                   relative_heatmap, relative_lines, rope_angle_heatmap, rope_wavelength_line)

IDS = [5, 9, 5, 12]


def test_embedding_and_cosine_heatmaps(tiny_lm):
    pe = E.prompt_embeddings(tiny_lm, IDS)
    fig = embedding_heatmap(pe.vectors, pe.tokens)
    hm = fig.data[0]
    assert np.asarray(hm.z).shape == (4, tiny_lm.info.hidden_size)
    assert len(set(hm.y)) == 4  # a repeated token still gets its own row label
    assert embedding_heatmap(pe.vectors, pe.tokens, max_tokens=2).data[0].z.shape[0] == 2
    c = cosine_heatmap(pe.cosine, pe.tokens, "t").data[0]
    assert c.zmin == -1 and c.zmax == 1
    nb = norms_bar(pe.norms, pe.tokens, pe.vocab_norm_quantiles)
    np.testing.assert_allclose(nb.data[0].y, pe.norms)
    for f in (fig, nb):
        assert f.layout.xaxis.title.text and f.layout.yaxis.title.text and f.layout.title.text


def test_pca_scatter_labels_each_distinct_prompt_token_once(tiny_lm):
    m = E.embedding_map(tiny_lm, IDS, sample_size=100)
    fig = pca_scatter(m)
    assert len(fig.data[0].x) == 100
    assert len(fig.data[1].x) == len(set(IDS))
    assert "variance" in fig.layout.xaxis.title.text


def test_neighbours_bar_best_at_top(tiny_lm):
    nb = E.nearest_tokens(tiny_lm, 5, 6)
    fig = neighbours_bar(nb)
    assert list(fig.data[0].x)[::-1] == list(nb.cosines)


def test_rope_figures(tiny_lm):
    ra = E.rope_angles(tiny_lm, 20)
    hm = rope_angle_heatmap(ra).data[0]
    np.testing.assert_allclose(np.asarray(hm.z), np.cos(ra.angles))
    wl = rope_wavelength_line(ra)
    assert wl.data[0].y[0] == np.float64(2 * np.pi / ra.inv_freq[0])
    assert wl.layout.yaxis.type == "log"


def test_relative_lines_overlap(tiny_lm):
    demo = E.relative_demo(tiny_lm, 5, 9, n_positions=24)
    assert np.asarray(relative_heatmap(demo).data[0].z).shape == (24, 24)
    lines = relative_lines(demo, starts=(0, 8, 16))
    assert len(lines.data) == 3
    short = len(lines.data[2].y)
    for tr in lines.data[:2]:  # same distance -> same score, whatever the absolute start
        np.testing.assert_allclose(tr.y[:short], lines.data[2].y, atol=1e-5)
