"""A team's model allow-list: aliases count as their model, other models are refused naming the field."""

from __future__ import annotations

import pytest

from gateway.core.errors import PermissionDenied
from gateway.policy.access import ModelAccess
from gateway.policy.auth import Principal

ACCESS = ModelAccess({"search": ["tiny"], "ads": ["meta/tiny"], "ops": None}, {"meta/tiny": "tiny"})


@pytest.mark.parametrize("team", ["search", "ads", "ops"])
@pytest.mark.parametrize("model", ["tiny", "meta/tiny"])
def test_a_model_and_its_alias_are_one_model(team: str, model: str) -> None:
    ACCESS.check(Principal(key_id="k", team=team), model)


def test_a_model_not_allowed_is_refused_naming_the_field() -> None:
    with pytest.raises(PermissionDenied) as caught:
        ACCESS.check(Principal(key_id="k", team="search"), "big")
    assert caught.value.param == "model" and "'big'" in str(caught.value)


def test_a_team_without_a_list_may_use_any_model() -> None:
    ACCESS.check(Principal(key_id="k", team="ops"), "anything/at-all")
    assert ACCESS.teams() == {"search", "ads", "ops"}
