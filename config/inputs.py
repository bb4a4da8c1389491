"""Untrusted input, checked once where it enters: JSON bodies, query strings and URL paths.

Every string that reaches the database passes here first. PostgreSQL cannot store a NUL
character in `text` or `jsonb`, and a lone UTF-16 surrogate cannot be encoded as UTF-8, so
both are refused with a 400 naming where they were found, instead of failing deep inside a
query. JSON is also bounded in shape (nesting depth, node count) so that a small body cannot
cost seconds of CPU or blow the interpreter's recursion limit.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from typing import IO, Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, parsers
from rest_framework.utils import json

# Deeper than any filter (ten levels) or metadata a client sends; shallow enough to walk safely.
MAX_JSON_DEPTH = 32
# `filters` in a query string (the mem0ai client's Python repr) is refused above this length.
MAX_QUERY_FILTER_CHARS = 8_000


class UnsafeInputError(ValueError):
    """Input PostgreSQL cannot store, or JSON too deep or too large to process."""


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (not valid Unicode)"
    return None


def check_text(value: str, where: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise UnsafeInputError(f"{where}: {problem}.")
    return value


def check_json(value: Any, where: str = "body") -> Any:
    """Walk a parsed JSON value (without recursion) and refuse what cannot be stored.

    Refused: strings or keys with NUL or lone surrogates, non-finite numbers, nesting deeper
    than MAX_JSON_DEPTH, more than ENGRAM_MAX_JSON_NODES values in all.
    """
    budget: int = settings.ENGRAM_MAX_JSON_NODES
    # Each entry: the value, its parent's entry and its key there (the path is spelled out only
    # for an error message), and its depth.
    stack: list[tuple[Any, Any, Any, int]] = [(value, None, None, 0)]
    while stack:
        entry = stack.pop()
        node, _, _, depth = entry
        budget -= 1
        if budget < 0:
            raise UnsafeInputError(
                f"{where} has more than {settings.ENGRAM_MAX_JSON_NODES} JSON values."
            )
        if depth > MAX_JSON_DEPTH:
            raise UnsafeInputError(
                f"{_path(where, entry)}: JSON nests deeper than {MAX_JSON_DEPTH} levels."
            )
        if isinstance(node, str):
            if text_problem(node):
                check_text(node, _path(where, entry))
        elif isinstance(node, float) and not math.isfinite(node):
            raise UnsafeInputError(f"{_path(where, entry)}: numbers must be finite.")
        elif isinstance(node, dict):
            for key, item in node.items():
                if text_problem(key):
                    check_text(key, f"{_path(where, entry)} key")
                stack.append((item, entry, key, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, entry, index, depth + 1) for index, item in enumerate(node))
    return value


def _path(where: str, entry: tuple[Any, Any, Any, int]) -> str:
    """`where.key[3].other` for an entry of check_json's walk."""
    parts: list[str] = []
    while entry[1] is not None:
        key = entry[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{str(key)[:40]}")
        entry = entry[1]
    return where + "".join(reversed(parts))


def parse_json(text: str, where: str) -> Any:
    """Strict JSON (no NaN) from untrusted text; any failure is an UnsafeInputError."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnsafeInputError(f"{where}: nests deeper than {MAX_JSON_DEPTH} levels.") from None
    except ValueError as exc:
        raise UnsafeInputError(f"{where}: not valid JSON ({exc}).") from None
    return check_json(value, where)


def parse_python_literal(text: str, where: str) -> Any:
    """A JSON-like Python literal, as `str(dict)` prints it; any failure is an UnsafeInputError.

    The official mem0ai client sends `filters` in a query string as the Python repr of a dict
    (`{'user_id': 'alice'}`). Only that shape is taken: dicts with string keys, lists, strings,
    numbers, True / False / None — no tuples, sets, bytes, expressions or names. The text is
    length-capped before Python's parser sees it, and the tree is walked without recursion, so
    neither CPU nor the recursion limit can be exhausted (ast.literal_eval promises neither).
    """
    if len(text) > MAX_QUERY_FILTER_CHARS:
        raise UnsafeInputError(f"{where} is longer than {MAX_QUERY_FILTER_CHARS} characters.")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise UnsafeInputError(f"{where}: neither JSON nor a Python dict literal.") from None
    return check_json(_literal(tree, where), where)


def _literal(tree: ast.expr, where: str) -> Any:
    refused = UnsafeInputError(f"{where}: only dicts, lists, strings, numbers, booleans, None.")
    holders: list[tuple[ast.expr, Callable[[Any], None], int]] = []
    result: list[Any] = []
    holders.append((tree, result.append, 0))
    while holders:
        node, put, depth = holders.pop()
        if depth > MAX_JSON_DEPTH:
            raise UnsafeInputError(f"{where}: nests deeper than {MAX_JSON_DEPTH} levels.")
        if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | None):
            put(node.value)
        elif (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float)
            and not isinstance(node.operand.value, bool)
        ):
            put(-node.operand.value)
        elif isinstance(node, ast.List):
            items: list[Any] = [None] * len(node.elts)
            put(items)
            for index, element in enumerate(node.elts):
                holders.append((element, _setter(items, index), depth + 1))
        elif isinstance(node, ast.Dict):
            mapping: dict[str, Any] = {}
            put(mapping)
            for key, element in zip(node.keys, node.values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    raise refused
                mapping[key.value] = None
                holders.append((element, _setter(mapping, key.value), depth + 1))
        else:
            raise refused
    return result[0]


def _setter(container: Any, index: Any) -> Callable[[Any], None]:
    def put(value: Any) -> None:
        container[index] = value

    return put


class SafeJSONParser(parsers.JSONParser):
    """DRF's JSON parser, plus the checks above; every failure is a 400 with `detail`."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(
                f"JSON parse error - nests deeper than {MAX_JSON_DEPTH} levels."
            ) from None
        try:
            return check_json(data)
        except UnsafeInputError as exc:
            raise exceptions.ParseError(str(exc)) from None


Handler = Callable[[HttpRequest], HttpResponse]


class SafeUrlMiddleware:
    """Refuse a path or query string that holds text PostgreSQL cannot store (400, JSON).

    Placed after the access-log middleware, so the refused request is still logged.
    """

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = text_problem(request.path)
        where = "path"
        if problem is None:
            for name, values in request.GET.lists():
                problem = text_problem(name) or next(filter(None, map(text_problem, values)), None)
                if problem is not None:
                    where = f"query parameter {name[:40]!r}"
                    break
        if problem is not None:
            return JsonResponse({"detail": f"{where} {problem}."}, status=400)
        return self.get_response(request)
