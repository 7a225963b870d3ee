"""Fused projections for compiled mode (engine.core.fused): the fused tree computes the eager model's logits for
every family of the architecture matrix, the eager model keeps its modules, parameters and exact logits, and each
group that cannot be fused is refused in one line with the unfused tree left to compile. No compile here: the
compiled step's matrix-multiply count is tested in test_compiled.py."""
import pytest
import torch

from engine.core import arch, loop
from engine.core import fused as F
from engine.models.loading import load_tiny_arch
from engine.models.tiny import TINY_ARCHS

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])  # [1, 8]
# Families whose attention holds one projection already (c_attn, query_key_value, qkv_proj ...) or whose layers
# have neither q/k/v nor gate/up projections: nothing to fuse, and nothing refused.
LOGITS = lambda m, ids: loop.full_pass(m, ids).logits  # noqa: E731 - the check pass, as engine.core.loop gives it
NOTHING_TO_FUSE = {"gpt2", "falcon", "gpt_neox", "bloom", "mpt", "codegen", "gpt_bigcode"}


def one_line(reason):
    return isinstance(reason, str) and reason and "\n" not in reason and len(reason) < 300


@pytest.mark.parametrize("name", TINY_ARCHS)
def test_the_fused_tree_computes_the_eager_logits_and_the_eager_model_stays_as_it_was(name):
    lm = load_tiny_arch(name)
    before = loop.full_pass(lm, IDS).logits
    params = dict(lm.model.named_parameters())
    modules = dict(lm.model.named_modules())
    f = F.fuse(lm.model, check=LOGITS)
    assert f.refused is None, f.refused
    assert (not f.fused) == (name in NOTHING_TO_FUSE), f.describe()
    assert torch.equal(loop.full_pass(lm, IDS).logits, before)  # the same values, viewed from the fused weights
    assert dict(lm.model.named_parameters()) == params and dict(lm.model.named_modules()) == modules
    assert not any(isinstance(m, (F.FusedInput, F.Slice)) for m in lm.model.modules())
    if f.fused:
        got = loop.full_pass(f.model, IDS).logits
        assert torch.allclose(got, before, rtol=1e-5, atol=1e-5)
        wrapped = [m for m in f.model.modules() if isinstance(m, F.FusedInput)]
        assert len(wrapped) == sum(f.fused.values()) and f.matmuls_saved > 0
        assert F.fuse(lm.model) is f  # made once per model


def test_each_group_is_one_matrix_multiply_over_a_copy_that_leaves_the_eager_weights_alone():
    """The fused tree holds its own concatenated weights. The eager parameters are not re-pointed at views of them:
    made on the worker in inference mode, such views turned the eager weights into inference tensors, and the
    training-memory pass (which asks them for gradients) failed once anyone had used compiled mode."""
    lm = load_tiny_arch("llama")
    with torch.inference_mode():  # as the compiled step makes it (engine.core.loop.drawn_step)
        f = F.fuse(lm.model)
    assert f.fused == {("q_proj", "k_proj", "v_proj"): 2, ("gate_proj", "up_proj"): 2}
    attn = arch.blocks(lm.model)[0].self_attn
    fused = arch.blocks(f.model)[0].self_attn
    assert isinstance(fused, F.FusedInput)
    qkv = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]
    assert torch.equal(fused.weight, torch.cat(qkv, 0))
    assert all(w.untyped_storage().data_ptr() != fused.weight.untyped_storage().data_ptr() for w in qkv)
    assert fused.weight.shape[0] == sum(w.shape[0] for w in qkv)
    assert not any(w.is_inference() for w in qkv) and all(w.requires_grad_(True) is w for w in qkv)


def _llama_with(change):
    lm = load_tiny_arch("llama")
    change(arch.blocks(lm.model)[1])
    return lm


def test_a_group_with_a_bias_on_some_projections_only_is_refused_in_one_line():
    def bias_on_k(blk):
        k = blk.self_attn.k_proj
        new = torch.nn.Linear(k.in_features, k.out_features, bias=True)
        new.weight.data.copy_(k.weight)
        blk.self_attn.k_proj = new

    lm = _llama_with(bias_on_k)
    f = F.fuse(lm.model)
    assert f.model is lm.model and not f.fused and one_line(f.refused) and "bias" in f.refused


def test_a_projection_that_is_not_a_plain_linear_layer_is_refused():
    class Wrapped(torch.nn.Linear):
        pass

    def wrap_up(blk):
        up = blk.mlp.up_proj
        new = Wrapped(up.in_features, up.out_features, bias=False)
        new.weight.data.copy_(up.weight)
        blk.mlp.up_proj = new

    f = F.fuse(_llama_with(wrap_up).model)
    assert not f.fused and one_line(f.refused) and "plain linear" in f.refused


def _transform_first(blk):
    """An attention that transforms its input before projecting it (a family this module never saw)."""
    base = type(blk.self_attn)

    class Transforming(base):
        def forward(self, hidden_states, *args, **kwargs):
            return super().forward(hidden_states.tanh(), *args, **kwargs)

    blk.self_attn.__class__ = Transforming


def test_a_family_whose_forward_uses_its_input_beyond_the_projections_is_refused_by_the_check():
    """The check pass is what guards families this module never saw: an attention that transforms its input before
    projecting it computes another thing when handed the projections' output, and is refused."""
    lm = _llama_with(_transform_first)
    f = F.fuse(lm.model, check=LOGITS)
    assert f.model is lm.model and not f.fused and one_line(f.refused) and "logits" in f.refused


def test_without_the_check_such_a_tree_computes_other_logits():
    """The refusal above could not fail if the unchecked fused tree of such a family gave the eager logits."""
    lm = _llama_with(_transform_first)
    tree = F.fuse(lm.model).model
    assert not torch.allclose(loop.full_pass(tree, IDS).logits, loop.full_pass(lm, IDS).logits, rtol=1e-3, atol=1e-3)
