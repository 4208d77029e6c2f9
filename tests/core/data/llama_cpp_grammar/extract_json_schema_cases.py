"""Extract the JSON Schema test cases of llama.cpp's tests/test-json-schema-to-grammar.cpp."""
import json
import re
import sys

src = open(sys.argv[1]).read()
cases = []
for m in re.finditer(r'test\(\{\s*(SUCCESS|FAILURE),\s*"([^"]*)",\s*R"""\((.*?)\)"""', src, re.S):
    status, name, schema = m.groups()
    try:
        json.loads(schema)
    except ValueError:
        continue
    cases.append({"name": name, "expected": status.lower(), "schema": json.loads(schema)})
json.dump(cases, open(sys.argv[2], "w"), indent=1)
print(len(cases))
