"""Anthropic's model list pages (``gateway/dialects/anthropic/models.py``), as properties: following
``has_more`` with ``after_id = last_id`` (forward) or ``before_id = first_id`` (backward, as the SDK's
``SyncPage`` does once a ``before_id`` was given) visits every model once, in order, in pages of
``limit``; any query value outside Anthropic's rules is a 400 naming its parameter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import InvalidRequest
from gateway.dialects.anthropic.models import DEFAULT_LIMIT, MAX_LIMIT, PageQuery, model_list, page_query

NAMES = st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=60)
LIMITS = st.integers(1, 70)
CREATED = "2026-11-28T00:00:00Z"


def ids(body: dict[str, object]) -> list[str]:
    return [card["id"] for card in body["data"]]  # type: ignore[attr-defined]


@given(NAMES, LIMITS)
def test_forward_pages_visit_every_model_once(names: list[str], limit: int) -> None:
    seen: list[str] = []
    body = model_list(names, CREATED, page_query([("limit", str(limit))]))
    pages = 1
    while True:
        got = ids(body)
        assert len(got) <= limit and (body["first_id"], body["last_id"]) == ((got[0], got[-1]) if got else (None, None))
        seen += got
        if not body["has_more"]:
            break
        assert len(got) == limit  # a page short of the limit is the last
        body = model_list(names, CREATED, page_query([("limit", str(limit)), ("after_id", got[-1])]))
        pages += 1
    assert seen == names
    assert pages == max(1, -(-len(names) // limit))


@given(NAMES.filter(bool), LIMITS, st.data())
def test_backward_pages_from_a_cursor(names: list[str], limit: int, data: st.DataObject) -> None:
    cursor = data.draw(st.sampled_from(names))
    seen: list[str] = []
    query = PageQuery(limit, before_id=cursor)
    while True:
        body = model_list(names, CREATED, query)
        got = ids(body)
        assert len(got) <= limit
        seen = got + seen
        if not body["has_more"]:
            break
        query = PageQuery(limit, before_id=str(body["first_id"]))
    assert seen == names[: names.index(cursor)]


@given(st.text(max_size=8))
def test_a_limit_is_checked(raw: str) -> None:
    fine = raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_LIMIT
    try:
        got = page_query([("limit", raw)])
    except InvalidRequest as err:
        assert not fine and err.param == "limit" and err.status == 400 and err.message.startswith("limit: ")
    else:
        assert fine and got.limit == int(raw)


@pytest.mark.parametrize("raw", ["0", "1001", "-1", "1.5", "", " 5", "abc", "\uff12"])  # the last: a full-width 2
def test_bad_limits(raw: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        page_query([("limit", raw)])
    assert caught.value.param == "limit"


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([("after_id", "")], "after_id"),
        ([("before_id", "")], "before_id"),
        ([("after_id", "a"), ("before_id", "b")], "before_id"),
        ([("limit", "2"), ("limit", "3")], "limit"),
        ([("after_id", "a"), ("after_id", "a")], "after_id"),
    ],
)
def test_bad_cursors(items: list[tuple[str, str]], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        page_query(items)
    assert caught.value.param == param


@given(NAMES, st.text(min_size=1, max_size=12), st.sampled_from(["after_id", "before_id"]))
def test_a_cursor_not_in_the_list_is_a_400(names: list[str], cursor: str, param: str) -> None:
    query = page_query([(param, cursor)])
    if cursor in names:
        model_list(names, CREATED, query)
        return
    with pytest.raises(InvalidRequest) as caught:
        model_list(names, CREATED, query)
    assert caught.value.param == param and caught.value.status == 400


def test_defaults_and_other_params() -> None:
    assert page_query([("beta", "true"), ("lifecycle[]", "active")]) == PageQuery(DEFAULT_LIMIT)
    names = [f"m{i}" for i in range(DEFAULT_LIMIT + 1)]
    body = model_list(names, CREATED, PageQuery())
    assert ids(body) == names[:DEFAULT_LIMIT] and body["has_more"] is True
    card = {"type": "model", "id": "m0", "display_name": "m0", "created_at": CREATED, "lifecycle": "active"}
    assert body["data"][0] == card
    assert model_list([], CREATED, PageQuery()) == {"data": [], "has_more": False, "first_id": None, "last_id": None}


@pytest.mark.parametrize(
    ("items", "active"),
    [
        ([], True),
        ([("lifecycle[]", "deprecated")], False),
        ([("lifecycle[]", "deprecated"), ("lifecycle[]", "active")], True),
        ([("lifecycle", "retired,active")], True),
        ([("lifecycle", "retired")], False),
    ],
)
def test_lifecycle_filter(items: list[tuple[str, str]], active: bool) -> None:
    """Every gateway model is active: a filter that leaves active out lists none."""
    body = model_list(["a", "b"], CREATED, page_query(items))
    assert ids(body) == (["a", "b"] if active else [])


@pytest.mark.parametrize("value", ["", "gone", "active,"])
def test_bad_lifecycle(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        page_query([("lifecycle[]", value)])
    assert caught.value.param == "lifecycle"
