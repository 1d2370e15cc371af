#!/usr/bin/env python3
"""Prepares rendered charts for the offline validators.

    manifests.py schema CRD_FILE KIND OUT.json
        The openAPIV3Schema of KIND's served storage version in CRD_FILE, as a JSON Schema
        for check-jsonschema. Objects with declared properties get additionalProperties:
        false, because the API server silently prunes fields its schema does not know: a
        misnamed field would be lost without a word.

    manifests.py split RENDERED OUT_DIR
        Splits `helm template` output: every kind but oxray.io's goes to OUT_DIR/builtin.yaml
        (for kubernetes-validate, which skips kinds it has no schema of), each oxray.io resource to OUT_DIR/<kind>-<name>.json (for
        check-jsonschema, which reads one document a file). The pod templates inside a
        RayCluster are also written to builtin.yaml as PodTemplate objects: the CRD keeps them
        unchecked (preserve-unknown-fields), so only this catches a typo in them.
"""

import json
import os
import sys

import yaml

GROUP = "oxray.io"


def load_all(path):
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def nullable_to_type(node):
    """OpenAPI's `nullable: true` is not JSON Schema: say it with a null type instead."""
    if isinstance(node, dict):
        out = {k: nullable_to_type(v) for k, v in node.items() if k != "nullable"}
        if node.get("nullable") is True and "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = types + ["null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = out["enum"] + [None]
        return out
    if isinstance(node, list):
        return [nullable_to_type(v) for v in node]
    return node


def refuse_unknown_fields(node):
    if isinstance(node, dict):
        out = {k: refuse_unknown_fields(v) for k, v in node.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [refuse_unknown_fields(v) for v in node]
    return node


def schema(crd_file, kind, out):
    for doc in load_all(crd_file):
        if doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        if spec["group"] != GROUP or spec["names"]["kind"] != kind:
            continue
        versions = [v for v in spec["versions"] if v.get("served") and v.get("storage")]
        if len(versions) != 1:
            sys.exit(f"{crd_file}: {kind} has {len(versions)} served storage versions, want 1")
        found = refuse_unknown_fields(nullable_to_type(versions[0]["schema"]["openAPIV3Schema"]))
        # The API server checks these itself; CRDs leave them out of the schema.
        found.setdefault("properties", {}).update(
            {
                "apiVersion": {"const": f"{GROUP}/{versions[0]['name']}"},
                "kind": {"const": kind},
                "metadata": {"type": "object"},
            }
        )
        found["required"] = sorted(set(found.get("required", [])) | {"apiVersion", "kind", "metadata"})
        with open(out, "w") as f:
            json.dump(found, f, indent=1)
        return
    sys.exit(f"{crd_file}: no CustomResourceDefinition of {GROUP} kind {kind}")


def pod_templates(cluster):
    name = cluster["metadata"]["name"]
    spec = cluster.get("spec", {})
    groups = [("head", spec.get("headGroupSpec", {}))]
    groups += [(g.get("groupName", "?"), g) for g in spec.get("workerGroupSpecs", [])]
    for group, group_spec in groups:
        if "template" in group_spec:
            yield {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{name}-{group}"},
                "template": group_spec["template"],
            }


def split(rendered, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    builtin = []
    custom = 0
    for doc in load_all(rendered):
        group = doc.get("apiVersion", "").split("/")[0]
        if group != GROUP:
            builtin.append(doc)
            continue
        custom += 1
        kind, name = doc["kind"].lower(), doc["metadata"]["name"]
        with open(os.path.join(out_dir, f"{kind}-{name}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        if doc["kind"] == "RayCluster":
            builtin.extend(pod_templates(doc))
    with open(os.path.join(out_dir, "builtin.yaml"), "w") as f:
        yaml.safe_dump_all(builtin, f, sort_keys=False)
    print(f"{rendered}: {len(builtin)} for kubernetes-validate, {custom} of {GROUP}", file=sys.stderr)


def main(argv):
    if len(argv) == 5 and argv[1] == "schema":
        schema(*argv[2:])
    elif len(argv) == 4 and argv[1] == "split":
        split(*argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
