"""A seeded generator of real-world-like JSON Schemas with valid and invalid instances.

Why our own: JSONSchemaBench (github.com/guidance-ai/jsonschemabench) holds real schemas
with tests, but its repository has no license file, so we do not copy it. We imitate the
shapes of its subsets instead (function-call arguments as in Glaive/BFCL, GitHub config
files easy to hard, Kubernetes objects, Snowplow events, Washington Post content, JSON
Schema Store files), using the keywords the issue lists (patternProperties, not, oneOf,
dependencies, pattern with lengths, multipleOf, formats, minProperties, if/then/else,
contains, uniqueItems, $ref chains, allOf).

Each builder returns (schema, example) where `example(rng)` draws a value meant to be
valid. Instances are a few examples plus mutations of them (a wrong type, a key removed
or added, a bound crossed, a character appended); every instance is then LABELLED BY
`jsonschema` (the oracle, with its format checker), never by what the mutation meant.

    python benchmarks/maskbench_schemas.py    # rewrites tests/data/maskbench/*.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import string
from pathlib import Path

import jsonschema

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "tests" / "data" / "maskbench"
SEED = 17
PER_SUBSET = 30  # schemas per subset: 8 subsets, 240 files

WORDS = [
    "name",
    "id",
    "type",
    "status",
    "url",
    "email",
    "count",
    "price",
    "tags",
    "created",
    "owner",
    "region",
    "version",
    "enabled",
    "timeout",
    "retries",
    "labels",
    "path",
    "mode",
    "level",
    "title",
    "city",
    "unit",
    "query",
    "limit",
    "offset",
    "lang",
    "score",
    "color",
    "size",
]
ENUMS = [
    ["celsius", "fahrenheit"],
    ["asc", "desc"],
    ["low", "medium", "high"],
    ["GET", "POST", "PUT", "DELETE"],
    ["draft", "published", "archived"],
    ["debug", "info", "warn", "error"],
    ["Always", "IfNotPresent", "Never"],
]
FORMATS = {
    "date": lambda r: f"20{r.randint(10, 29)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    "date-time": lambda r: f"2024-0{r.randint(1, 9)}-1{r.randint(0, 9)}T1{r.randint(0, 9)}:3{r.randint(0, 9)}:00Z",
    "email": lambda r: f"{r.choice(WORDS)}{r.randint(1, 99)}@example.com",
    "uri": lambda r: f"https://example.com/{r.choice(WORDS)}/{r.randint(1, 999)}",
    "uuid": lambda r: (
        f"{r.getrandbits(32):08x}-{r.getrandbits(16):04x}-4{r.getrandbits(12):03x}-a{r.getrandbits(12):03x}-"
        f"{r.getrandbits(48):012x}"
    ),
    "ipv4": lambda r: ".".join(str(r.randint(0, 255)) for _ in range(4)),
}


def word(rng: random.Random, length: tuple[int, int] = (1, 10), alphabet: str = string.ascii_lowercase) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(*length)))


# ---------------------------------------------------------------------------------------
# Leaves: (schema, example)
# ---------------------------------------------------------------------------------------
def leaf(rng: random.Random, hard: bool = False):
    """One scalar property, with the constraints real schemas put on scalars."""
    kinds = ["string", "enum", "integer", "number", "boolean", "format", "nullable", "pattern"]
    if hard:
        kinds += [
            "multipleOf",
            "pattern_length",
            "int_or_string",
            "not_enum",
            "decimal_step",
            "format_length",
            "other_format",
            "slug_length",
        ]
    kind = rng.choice(kinds)
    desc = {"description": f"The {rng.choice(WORDS)} of the item."} if rng.random() < 0.5 else {}
    if kind == "string":
        lo, hi = rng.choice([(0, None), (1, None), (1, 64), (0, 8), (3, 20)])
        schema = {"type": "string", **desc, **({"minLength": lo} if lo else {}), **({"maxLength": hi} if hi else {})}
        return schema, lambda r: word(r, (max(lo, 1), min(hi or 12, 12)))
    if kind == "enum":
        values = rng.choice(ENUMS)
        return {"type": "string", "enum": values, **desc}, lambda r: r.choice(values)
    if kind == "integer":
        lo, hi = rng.choice([(None, None), (0, None), (1, 100), (0, 65535), (-10, 10), (1, None)])
        schema = {
            "type": "integer",
            **desc,
            **({} if lo is None else {"minimum": lo}),
            **({} if hi is None else {"maximum": hi}),
        }
        return schema, lambda r: r.randint(0 if lo is None else lo, 1000 if hi is None else hi)
    if kind == "number":
        lo, hi = rng.choice([(None, None), (0, None), (0, 1), (-90, 90)])
        schema = {
            "type": "number",
            **desc,
            **({} if lo is None else {"minimum": lo}),
            **({} if hi is None else {"maximum": hi}),
        }
        return schema, lambda r: round(r.uniform(0 if lo is None else lo, 500 if hi is None else hi), 2)
    if kind == "boolean":
        return {"type": "boolean", **desc}, lambda r: r.random() < 0.5
    if kind == "format":
        name = rng.choice(sorted(FORMATS))
        return {"type": "string", "format": name, **desc}, FORMATS[name]
    if kind == "nullable":
        return {"type": ["string", "null"], "maxLength": 255}, lambda r: None if r.random() < 0.3 else word(r)
    if kind == "pattern":
        pattern, make = rng.choice(
            [
                ("^[a-z0-9-]+$", lambda r: word(r, (1, 8), string.ascii_lowercase + "-0")),
                ("^[A-Z]{2}$", lambda r: word(r, (2, 2), string.ascii_uppercase)),
                ("^v[0-9]+\\.[0-9]+$", lambda r: f"v{r.randint(0, 9)}.{r.randint(0, 20)}"),
                ("^#[0-9a-fA-F]{6}$", lambda r: f"#{r.getrandbits(24):06x}"),
            ]
        )
        return {"type": "string", "pattern": pattern}, make
    if kind == "multipleOf":
        step = rng.choice([2, 5, 10, 15])
        return {
            "type": "integer",
            "multipleOf": step,
            "minimum": 0,
            "maximum": 300,
        }, lambda r: step * r.randint(0, 300 // step)
    if kind == "decimal_step":
        return {"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 10}, lambda r: r.randint(0, 20) / 2
    if kind == "pattern_length":
        return (
            {"type": "string", "pattern": "^[a-zA-Z0-9_]+$", "minLength": 3, "maxLength": 16},
            lambda r: word(r, (3, 16), string.ascii_letters + "_"),
        )
    if kind == "int_or_string":  # Kubernetes' IntOrString
        return (
            {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
            lambda r: r.randint(1, 9000) if r.random() < 0.5 else f"{r.randint(1, 99)}%",
        )
    if kind == "format_length":  # as Snowplow and GitHub configs bound their URIs and emails
        name, limit = rng.choice([("uri", 2048), ("email", 255), ("date-time", 64), ("uri", 40), ("hostname", 253)])
        make = FORMATS.get(name) or (lambda r: f"{word(r)}.example.com")
        return {"type": "string", "format": name, "maxLength": limit}, make
    if kind == "other_format":  # formats outside JSON Schema's list (annotations for a validator)
        name = rng.choice(["url", "path", "int32", "ipv6", "duration"])
        make = {"ipv6": lambda r: f"2001:db8::{r.getrandbits(16):x}", "duration": lambda r: f"PT{r.randint(1, 59)}M"}
        return {"type": "string", "format": name}, make.get(name, lambda r: "/" + word(r))
    if kind == "slug_length":  # a pattern with a repeated group, and a length
        return (
            {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 32},
            lambda r: "-".join(word(r, (1, 6)) for _ in range(r.randint(1, 3))),
        )
    values = rng.choice(ENUMS)  # not_enum: any string but these
    return {"type": "string", "not": {"enum": values}}, lambda r: word(r, (1, 6), "xyz")


def obj(rng: random.Random, depth: int, hard: bool = False, closed: bool | None = None):
    """An object of 2-6 properties (leaves, arrays, nested objects), some required."""
    names = rng.sample(WORDS, rng.randint(2, 6))
    props, makers = {}, {}
    for name in names:
        roll = rng.random()
        if depth > 0 and roll < 0.2:
            props[name], makers[name] = obj(rng, depth - 1, hard)
        elif roll < 0.35:
            props[name], makers[name] = array(rng, depth, hard)
        else:
            props[name], makers[name] = leaf(rng, hard)
    required = [n for n in names if rng.random() < 0.6]
    schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if closed if closed is not None else rng.random() < 0.5:
        schema["additionalProperties"] = False

    def example(r: random.Random) -> dict:
        return {n: makers[n](r) for n in names if n in required or r.random() < 0.7}

    return schema, example


def array(rng: random.Random, depth: int, hard: bool = False):
    """An array of leaves or small objects, with the item-count keywords."""
    if depth > 0 and rng.random() < 0.3:
        items, make = obj(rng, depth - 1, hard)
    else:
        items, make = leaf(rng, hard)
    lo, hi = rng.choice([(0, None), (1, None), (1, 10), (0, 3)])
    schema = {"type": "array", "items": items, **({"minItems": lo} if lo else {}), **({"maxItems": hi} if hi else {})}
    if hard and "enum" in items and rng.random() < 0.5:
        schema["uniqueItems"] = True
        return schema, lambda r: r.sample(items["enum"], r.randint(max(lo, 1), min(len(items["enum"]), hi or 9)))
    return schema, lambda r: [make(r) for _ in range(r.randint(max(lo, 1), min(hi or 3, 3)))]


# ---------------------------------------------------------------------------------------
# Subsets, named after JSONSchemaBench's
# ---------------------------------------------------------------------------------------
def function_call(rng: random.Random):
    """Glaive/BFCL: a function's arguments, flat, mostly described strings, enums, numbers."""
    schema, example = obj(rng, 0, closed=False)
    return {"type": "object", "properties": schema["properties"], "required": schema.get("required", [])}, example


def github_easy(rng: random.Random):
    schema, example = obj(rng, 1)
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Config", **schema}, example


def github_medium(rng: random.Random):
    """definitions + $ref, enums, maps with patternProperties, minProperties."""
    inner, make_inner = obj(rng, 1)
    shape = rng.choice(["ref", "map", "pattern", "minprops", "map_minprops", "allOf_notes"])
    outer, make_outer = obj(rng, 0, closed=False)
    if shape == "ref":
        outer["properties"]["item"] = {"$ref": "#/definitions/item"}
        outer.setdefault("required", []).append("item")
        return ({**outer, "definitions": {"item": inner}}, lambda r: {**make_outer(r), "item": make_inner(r)})
    if shape == "map":
        value, make_value = leaf(rng)
        return (
            {"type": "object", "additionalProperties": value},
            lambda r: {word(r): make_value(r) for _ in range(r.randint(0, 3))},
        )
    if shape == "pattern":  # x- extensions, as OpenAPI files allow
        outer["patternProperties"] = {"^x-": {"type": "string"}}
        outer["additionalProperties"] = False
        return outer, lambda r: {**make_outer(r), **({"x-" + word(r): word(r)} if r.random() < 0.5 else {})}
    if shape == "map_minprops":  # services: {name: config}, at least one
        value, make_value = obj(rng, 0)
        return (
            {"type": "object", "additionalProperties": value, "minProperties": 1},
            lambda r: {word(r): make_value(r) for _ in range(r.randint(1, 3))},
        )
    if shape == "allOf_notes":  # allOf branches with editor annotations of their own
        return (
            {
                "allOf": [
                    {**outer, "x-intellij-html-description": "the settings"},
                    {"type": "object", "x-intellij-html-description": "more settings"},
                ]
            },
            make_outer,
        )
    outer["minProperties"] = 1
    return outer, lambda r: make_outer(r) or {next(iter(outer["properties"])): None}


def github_hard(rng: random.Random):
    """Applicators: oneOf with a discriminator, if/then/else, dependencies, not, allOf of $refs."""
    shape = rng.choice(
        ["oneOf", "if", "dependencies", "not_required", "allOf_refs", "contains", "tree", "propertyNames"]
    )
    base, make_base = obj(rng, 1, hard=True, closed=False)
    if shape == "oneOf":
        kinds = rng.sample(["circle", "square", "line", "point"], 2)
        branches = [
            {
                "type": "object",
                "properties": {"kind": {"const": k}, "size": {"type": "number", "minimum": 0}},
                "required": ["kind"],
            }
            for k in kinds
        ]
        return (
            {"oneOf": branches},
            lambda r: {"kind": r.choice(kinds), **({"size": r.randint(0, 9)} if r.random() < 0.5 else {})},
        )
    if shape == "if":
        return (
            {
                "type": "object",
                "properties": {"country": {"enum": ["US", "CA"]}, "postal_code": {"type": "string"}},
                "required": ["country", "postal_code"],
                "if": {"properties": {"country": {"const": "US"}}},
                "then": {"properties": {"postal_code": {"pattern": "^[0-9]{5}$"}}},
                "else": {"properties": {"postal_code": {"pattern": "^[A-Z][0-9][A-Z] [0-9][A-Z][0-9]$"}}},
            },
            lambda r: (
                {"country": "US", "postal_code": f"{r.randint(0, 99999):05d}"}
                if r.random() < 0.5
                else {"country": "CA", "postal_code": "K1A 0B1"}
            ),
        )
    if shape == "dependencies":
        names = list(base["properties"])
        base["$schema"] = "http://json-schema.org/draft-07/schema#"
        base["dependencies"] = {names[0]: names[1:2]}

        def with_dependency(r: random.Random) -> dict:  # both properties present, in schema order
            value = {**make_base(r), **make_base(random.Random(1))}
            return {n: value[n] for n in base["properties"] if n in value}

        return base, with_dependency
    if shape == "not_required":
        names = list(base["properties"])
        base["not"] = {"required": names[-1:]}
        base["required"] = [n for n in base.get("required", []) if n != names[-1]]
        if not base["required"]:
            del base["required"]
        return base, lambda r: {k: v for k, v in make_base(r).items() if k != names[-1]}
    if shape == "allOf_refs":  # the chain of allOf of two equal $refs (issue 17's bug)
        leafs, make_leaf = leaf(rng)
        defs = {
            "a": {"allOf": [{"$ref": "#/$defs/b"}, {"$ref": "#/$defs/b"}]},
            "b": {"allOf": [{"$ref": "#/$defs/c"}, {"$ref": "#/$defs/c"}]},
            "c": leafs,
        }
        return (
            {"type": "object", "properties": {"value": {"$ref": "#/$defs/a"}}, "required": ["value"], "$defs": defs},
            lambda r: {"value": make_leaf(r)},
        )
    if shape == "contains":
        return (
            {
                "type": "array",
                "items": {"type": "string", "enum": ["read", "write", "admin"]},
                "contains": {"const": "admin"},
                "maxItems": 4,
            },
            lambda r: r.sample(["read", "write"], r.randint(0, 2)) + ["admin"],
        )
    if shape == "tree":
        return (
            {
                "$defs": {
                    "node": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "maxLength": 20},
                            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                        },
                        "required": ["name"],
                        "additionalProperties": False,
                    }
                },
                "$ref": "#/$defs/node",
            },
            lambda r: {"name": word(r), "children": [{"name": word(r), "children": []}]},
        )
    base["propertyNames"] = {"pattern": "^[a-z]+$"}
    return base, make_base


def kubernetes(rng: random.Random):
    """A Kubernetes-like object: metadata with label maps, a spec, int-or-string, int32 formats."""
    spec, make_spec = obj(rng, 1, hard=True)
    port_format = rng.choice(["int32", None])
    schema = {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "port": {"type": "integer", **({"format": port_format} if port_format else {})},
            "spec": spec,
        },
    }
    return schema, lambda r: {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": word(r), "labels": {"app": word(r)}},
        "port": r.randint(1, 65535),
        "spec": make_spec(r),
    }


def snowplow(rng: random.Random):
    """A Snowplow self-describing event: closed, nullable fields, big integer bounds."""
    body, make_body = obj(rng, 0, closed=True)
    body["properties"]["eventId"] = {"type": "string", "format": "uuid"}
    body["properties"]["amount"] = {"type": ["integer", "null"], "minimum": 0, "maximum": 2147483647}
    # (JSONSchemaBench strips Snowplow's own "$schema" URI, which validators do not know)
    return (
        {"self": {"vendor": "com.acme", "name": word(rng), "format": "jsonschema", "version": "1-0-0"}, **body},
        lambda r: {**make_body(r), "eventId": FORMATS["uuid"](r), "amount": r.choice([None, r.randint(0, 10**6)])},
    )


def washington_post(rng: random.Random):
    """Content elements: definitions, a type discriminator, $refs in oneOf, anyOf or alone."""
    kinds = ["text", "image", "video"]
    combine = rng.choice(["oneOf", "anyOf", "ref"])
    if combine == "ref":
        kinds = kinds[:1]
    defs = {
        k: {
            "type": "object",
            "properties": {
                "type": {"const": k},
                "_id": {"type": "string"},
                "content": {"type": "string"} if k == "text" else {"type": "string", "format": "uri"},
            },
            "required": ["type", "_id"],
            "additionalProperties": False,
        }
        for k in kinds
    }
    return (
        {
            "definitions": defs,
            "type": "object",
            "properties": {
                "headline": {"type": "string", "maxLength": 120},
                "content_elements": {
                    "type": "array",
                    "items": {"$ref": "#/definitions/text"}
                    if combine == "ref"
                    else {combine: [{"$ref": f"#/definitions/{k}"} for k in kinds]},
                },
            },
            "required": ["headline"],
        },
        lambda r: {
            "headline": word(r, (1, 30)),
            "content_elements": [
                {"type": "text", "_id": word(r), "content": word(r)},
                {"type": "image", "_id": word(r), "content": FORMATS["uri"](r)},
            ][: r.randint(0, len(kinds))],
        },
    )


def schema_store(rng: random.Random):
    """JSON Schema Store files: string-or-list, patternProperties maps, not, enum unions."""
    shape = rng.choice(
        ["string_or_list", "pattern_map", "not_type", "enum_or_pattern", "oneOf_overlap", "pattern_and_listed"]
    )
    if shape == "oneOf_overlap":  # exactly one: a listed value fits both branches, so it is invalid
        return (
            {"type": "object", "properties": {"level": {"oneOf": [{"type": "string"}, {"enum": ["off", "on", 0, 1]}]}}},
            lambda r: {"level": r.choice(["warn", "auto", 0, 1, word(r)])},
        )
    if shape == "pattern_and_listed":  # a listed key that the pattern matches too
        return (
            {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "patternProperties": {"^[a-z]+$": {"type": "string", "maxLength": 8}},
                "additionalProperties": False,
            },
            lambda r: {"name": word(r, (1, 8)), **{word(r): word(r, (1, 8)) for _ in range(r.randint(0, 2))}},
        )
    if shape == "string_or_list":
        return (
            {
                "type": "object",
                "properties": {
                    "extends": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
                },
            },
            lambda r: {"extends": word(r) if r.random() < 0.5 else [word(r), word(r)]},
        )
    if shape == "pattern_map":
        value, make_value = obj(rng, 0)
        return (
            {"type": "object", "patternProperties": {"^[a-z][a-z0-9_]*$": value}, "additionalProperties": False},
            lambda r: {word(r): make_value(r) for _ in range(r.randint(0, 2))},
        )
    if shape == "not_type":
        return (
            {"type": "object", "properties": {"value": {"not": {"type": ["object", "array"]}}}},
            lambda r: {"value": r.choice([1, "a", None, True, 2.5])},
        )
    return (
        {
            "type": "object",
            "properties": {
                "level": {
                    "anyOf": [{"enum": ["off", "warn", "error"]}, {"type": "integer", "minimum": 0, "maximum": 2}]
                }
            },
        },
        lambda r: {"level": r.choice(["off", "warn", 0, 2])},
    )


SUBSETS = {
    "FunctionCall": function_call,
    "Github_easy": github_easy,
    "Github_medium": github_medium,
    "Github_hard": github_hard,
    "Kubernetes": kubernetes,
    "Snowplow": snowplow,
    "WashingtonPost": washington_post,
    "JsonSchemaStore": schema_store,
}


# ---------------------------------------------------------------------------------------
# Instances: examples, their mutations, and jsonschema's verdicts
# ---------------------------------------------------------------------------------------
def validator_for(schema):
    """The validator of the schema's own $schema (draft 2020-12 if absent), with formats checked."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def mutate(value, rng: random.Random):
    """A copy of `value` with one random change somewhere inside."""
    value = copy.deepcopy(value)
    holders = []  # (container, key) pairs, every place in the value

    def walk(node):
        if isinstance(node, dict):
            for k in node:
                holders.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for i in range(len(node)):
                holders.append((node, i))
                walk(node[i])

    walk(value)
    containers = [value] + [c[k] for c, k in holders if isinstance(c[k], (dict, list))]
    action = rng.choice(["retype", "retype", "bound", "drop", "add", "text"])
    if action == "add" or not holders:
        target = rng.choice(containers)
        if isinstance(target, dict):
            target[rng.choice(["extra", "x-note", "Name", "id"])] = rng.choice([1, "x", None])
        elif isinstance(target, list):
            target.append(rng.choice([target[0] if target else 0, "x", {}]))
        else:
            return rng.choice([[value], {"value": value}])
        return value
    holder, key = rng.choice(holders)
    old = holder[key]
    if action == "drop":
        del holder[key]
    elif action == "retype":
        holder[key] = rng.choice([v for v in ["1", 1, 1.5, None, True, [], {}, "true"] if type(v) is not type(old)])
    elif action == "bound" and isinstance(old, (int, float)) and not isinstance(old, bool):
        holder[key] = rng.choice([old + 1, old - 1, -old - 1, old * 1000 + 7, 2**40, old + 0.25])
    elif isinstance(old, str):
        holder[key] = rng.choice([old + rng.choice(["!", " ", "A", "0", "é"]), "", old * 20, old.upper()])
    else:
        holder[key] = rng.choice([0, "x", None])
    return value


def instances(schema, example, rng: random.Random, valid: int = 3, invalid: int = 4) -> list[dict]:
    """Up to `valid` valid and `invalid` invalid distinct instances, labelled by jsonschema."""
    check = validator_for(schema)
    seeds = [example(rng) for _ in range(6)]
    found: dict[bool, list] = {True: [], False: []}
    seen: set[str] = set()
    for candidate in seeds + [mutate(rng.choice(seeds), rng) for _ in range(40)]:
        text = json.dumps(candidate, sort_keys=True)
        ok = check.is_valid(candidate)
        if text in seen or len(found[ok]) >= (valid if ok else invalid):
            continue
        seen.add(text)
        found[ok].append(candidate)
    return [
        {"description": "valid" if ok else "invalid", "valid": ok, "data": data}
        for ok in (True, False)
        for data in found[ok]
    ]


def generate(seed: int = SEED, per_subset: int = PER_SUBSET) -> dict[str, dict]:
    """file name -> {"description", "schema", "tests"} for every subset; deterministic in `seed`."""
    out = {}
    for subset, builder in SUBSETS.items():
        rng = random.Random(f"{seed}/{subset}")
        for i in range(per_subset):
            schema, example = builder(rng)
            tests = instances(schema, example, rng)
            if any(t["valid"] for t in tests) and any(not t["valid"] for t in tests):
                out[f"{subset}---{i:03d}.json"] = {
                    "description": f"generated {subset} schema {i} (seed {seed})",
                    "schema": schema,
                    "tests": tests,
                }
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help, nothing else
    SAMPLE_DIR.mkdir(parents=True, exist_ok=True)
    for old in SAMPLE_DIR.glob("*---*.json"):
        old.unlink()
    files = generate()
    for name, content in files.items():
        (SAMPLE_DIR / name).write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(files)} files, {sum(len(f['tests']) for f in files.values())} instances to {SAMPLE_DIR}")


if __name__ == "__main__":
    main()
