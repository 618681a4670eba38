"""HParams: typed overrides, helpful errors, JSON round trip."""

import pytest

from t2tcli.errors import UserError
from t2tcli.hparams import HParams


def base() -> HParams:
    return HParams(a=0, b=0.1, c=False, d=[0], e="x", layout="", mesh_shape="", f=None, names=["a"], empty=[])


def test_parse_types_each_value_by_its_default():
    hp = base().parse("a=1,b=0.5,c=true,d=[1,2],e=text")
    assert (hp.a, hp.b, hp.c, hp.d, hp.e) == (1, 0.5, True, [1, 2], "text")
    assert isinstance(hp.b, float) and isinstance(hp.a, int)


def test_int_accepted_for_float_and_bool_spellings():
    hp = base().parse("b=3,c=1")
    assert hp.b == 3.0 and isinstance(hp.b, float) and hp.c is True
    assert base().parse("c=False").c is False


def test_layout_and_mesh_shape_are_expressible():
    hp = base().parse("layout=batch:batch;d_ff:model;heads:model,mesh_shape=model:2,batch:2,a=3")
    assert hp.layout == "batch:batch;d_ff:model;heads:model"
    assert hp.mesh_shape == "model:2,batch:2"
    assert hp.a == 3


def test_unknown_key_names_closest():
    with pytest.raises(UserError, match=r"unknown hparam 'layot'; did you mean 'layout'\?"):
        base().parse("layot=x")


def test_wrong_type_names_key():
    with pytest.raises(UserError, match=r"hparam 'a': expected int, got 'abc'"):
        base().parse("a=abc")
    with pytest.raises(UserError, match=r"hparam 'd': expected int, got 'x'"):
        base().parse("d=[1,x]")
    with pytest.raises(UserError, match=r"hparam 'c': expected bool"):
        base().parse("c=maybe")
    with pytest.raises(UserError, match=r"hparam 'd': expected a list"):
        base().parse("d=3")


def test_malformed_override():
    with pytest.raises(UserError, match="not of the form name=value"):
        base().parse("=3")


def test_none_default_and_empty_list_infer_types():
    hp = base().parse("f=0.25,empty=[1,2]")
    assert hp.f == 0.25 and hp.empty == [1, 2]


def test_set_hparam_checks_types():
    hp = base()
    hp.a = 5
    assert hp.a == 5
    with pytest.raises(UserError, match="hparam 'a': expected int"):
        hp.a = "five"
    with pytest.raises(UserError, match="unknown hparam"):
        hp.zzz = 1


def test_json_round_trip():
    hp = base().parse("a=7,d=[3,4],layout=batch:batch")
    again = HParams.from_json(hp.to_json())
    assert again == hp
    assert again.values() == hp.values()


def test_missing_attribute_suggests():
    with pytest.raises(AttributeError, match="did you mean 'layout'"):
        base().layuot  # noqa: B018


def test_a_tensor2tensor_set_holds_only_hparams_and_round_trips():
    """The mark of a tensor2tensor set (heads share the width) is no hparam: it must not reach
    hparams.json, which is read back with the same names."""
    import json

    hp = HParams(d_model=8, num_heads=2, d_kv=4, hidden_size=8).share_width_among_heads()
    assert "heads_share_width" not in hp.values()
    assert HParams(**json.loads(hp.to_json())).values() == hp.values()
    hp.parse("num_heads=4")
    assert hp.d_kv == 2, "d_kv follows the heads in a tensor2tensor set"


def test_an_hparam_named_after_a_method_is_one_line():
    with pytest.raises(UserError, match="hparam name 'values' is reserved"):
        HParams(values=1)
