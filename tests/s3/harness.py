"""What the S3 test scripts share beside the server (s3_server.py), the proxy (fault_proxy.py)
and the check tally (tests/tally.py):

    from harness import schema_errors, section
    check(not schema_errors(SCHEMAS, "inspect", doc), ...)
    with section("commands"):           # prints "  [commands: 12.3 s]" when the block ends
        ...

schema_errors(folder, name, doc): what NAME.schema.json in `folder` (docs/schemas, whose other
schemas resolve its $refs) finds wrong in `doc`, one line each, empty when it is valid.
tests/e2e/json_schema_test.py checks the local outputs against them; the S3 scripts check the
s3:// ones, with their `s3` object. Needs jsonschema (tools/requirements.txt).
"""
import contextlib
import functools
import json
import os
import time


@functools.lru_cache(maxsize=None)
def _schemas(folder):
    import referencing
    import referencing.jsonschema
    docs = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".schema.json"):
            with open(os.path.join(folder, f)) as fh:
                docs[f[:-len(".schema.json")]] = json.load(fh)
    registry = referencing.Registry().with_resources(
        (d["$id"], referencing.jsonschema.DRAFT202012.create_resource(d)) for d in docs.values())
    return docs, registry


def schema_errors(folder, name, doc):
    import jsonschema
    docs, registry = _schemas(str(folder))
    v = jsonschema.Draft202012Validator(docs[name], registry=registry)
    return [f"{list(e.absolute_path)}: {e.message}" for e in v.iter_errors(doc)]


@contextlib.contextmanager
def section(name):
    """A part of a run, timed: its seconds printed when it ends (what each server's run costs)."""
    t = time.monotonic()
    try:
        yield
    finally:
        print(f"  [{name}: {time.monotonic() - t:.1f} s]", flush=True)
