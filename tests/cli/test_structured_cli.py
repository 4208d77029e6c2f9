"""Structured output from the command line: `cera run --json-schema / --json / --grammar /
--regex` on a real file, each output checked by an independent checker (the `jsonschema`
package, `json`, Python's `re`); stdout carries the value alone."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema
import pytest

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            },
        },
        "status": {"anyOf": [{"const": "open"}, {"const": "shipped"}]},
    },
    "required": ["id", "items", "status"],
}


def cera(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.mark.parametrize("schema, seed", [(PERSON, 1), (PERSON, 2), (ORDER, 3)], ids=["person-1", "person-2", "order"])
def test_json_schema_outputs_are_valid_instances(smollm2_path, tmp_path, schema, seed):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    r = cera("run", "-m", smollm2_path, "-t", "2", "--json-schema", f"@{path}", "--temp", "0.8", "--seed", seed,
             "-n", "200", "-p", "Make up a record.")  # fmt: skip
    assert r.returncode == 0, r.stderr
    jsonschema.validate(json.loads(r.stdout), schema, format_checker=jsonschema.FormatChecker())


def test_json_gives_one_object_on_stdout(smollm2_path):
    prompt = 'Return {"name": "Bob", "age": 30} as JSON.'
    r = cera("run", "-m", smollm2_path, "-t", "2", "--json", "--temp", "0", "-n", "150", "-p", prompt)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"name": "Bob", "age": 30}
    assert "stop: grammar" in r.stderr


def test_grammar_and_regex_outputs_match(smollm2_path, tmp_path):
    gbnf = tmp_path / "yn.gbnf"
    gbnf.write_text('root ::= ("yes" | "no") ", because " [a-z ]{3,40} "."\n')
    r = cera("run", "-m", smollm2_path, "-t", "2", "--grammar", f"@{gbnf}", "--temp", "0.7", "--seed", "5",
             "-n", "60", "-p", "Is the sky blue?")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"(yes|no), because [a-z ]{3,40}\.\n?", r.stdout)
    r = cera("run", "-m", smollm2_path, "-t", "2", "--regex", r"[0-9]{3}-[0-9]{4}", "--temp", "0.9", "--seed", "7",
             "-n", "20", "-p", "A phone number:")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}\n?", r.stdout)


def test_a_cut_value_is_reported_incomplete(smollm2_path):
    r = cera("run", "-m", smollm2_path, "-t", "2", "--json", "--temp", "0", "-n", "40", "--stop", '"',
             "-p", "Make up a record.")  # fmt: skip
    assert "incomplete" in r.stderr.lower()
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.stdout)


A_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"},
                   "hobbies": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "email", "hobbies"],
}  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_schema_value_is_whole_at_the_default_limit(smollm2_path, tmp_path, seed):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(A_PERSON))
    r = cera("run", "-m", smollm2_path, "-t", "2", "--json-schema", f"@{path}", "--seed", seed, "-n", "64",
             "Make up a person with many hobbies.")  # fmt: skip
    assert r.returncode == 0, r.stderr
    jsonschema.validate(json.loads(r.stdout), A_PERSON)
    assert "incomplete" not in r.stderr


def test_a_limit_below_the_shortest_value_exits_3(smollm2_path):
    r = cera("run", "-m", smollm2_path, "-t", "2", "--json-schema", json.dumps(PERSON), "-n", "4", "Make up a record.")
    assert r.returncode == 3, r.stderr
    assert "-n/--max-tokens" in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


def test_a_bad_grammar_names_line_and_column(smollm2_path, tmp_path):
    gbnf = tmp_path / "bad.gbnf"
    gbnf.write_text('root ::= "a"\nitem ::= "b" )\n')
    r = cera("run", "-m", smollm2_path, "-t", "2", "--grammar", f"@{gbnf}", "-n", "4", "-p", "x")
    assert r.returncode != 0
    assert "line 2, column 14" in r.stderr and "')'" in r.stderr and "Traceback" not in r.stderr
