#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM of the nodekeeper binary's dependency tree for the
building host's platform, from `cargo metadata --locked` (what the binary links: normal and build
dependencies, not dev-dependencies) and Cargo.lock's checksums.

    python3 scripts/sbom.py VERSION COMMIT > nodekeeper.cdx.json
"""
import json
import subprocess
import sys
import tomllib
from pathlib import Path

version, commit = sys.argv[1], sys.argv[2]
repo = Path(__file__).resolve().parent.parent
host = next(l.split(": ", 1)[1] for l in subprocess.run(
    ["rustc", "-vV"], capture_output=True, check=True, text=True).stdout.splitlines()
    if l.startswith("host: "))
meta = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", host],
    cwd=repo, capture_output=True, check=True, text=True).stdout)
lock = tomllib.loads((repo / "Cargo.lock").read_text())
checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(i for i, p in packages.items() if p["name"] == "nodekeeper-cli")

# What the binary is built from: edges that are not dev-only.
seen, stack, edges = set(), [root], {}
while stack:
    current = stack.pop()
    if current in seen:
        continue
    seen.add(current)
    deps = []
    for dep in nodes[current]["deps"]:
        kinds = {k["kind"] for k in dep["dep_kinds"]}
        if kinds - {"dev"}:
            deps.append(dep["pkg"])
            stack.append(dep["pkg"])
    edges[current] = sorted(set(deps))

def ref(pid):
    p = packages[pid]
    return f"pkg:cargo/{p['name']}@{p['version']}"

components = []
for pid in sorted(seen - {root}, key=ref):
    p = packages[pid]
    c = {"type": "library", "bom-ref": ref(pid), "name": p["name"], "version": p["version"],
         "purl": ref(pid)}
    if p.get("license"):
        c["licenses"] = [{"expression": p["license"]}]
    digest = checksums.get((p["name"], p["version"]))
    if digest:
        c["hashes"] = [{"alg": "SHA-256", "content": digest}]
    if p.get("source") is None:
        c["description"] = "part of nodekeeper (a workspace crate)"
    components.append(c)

bom = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.5",
    "version": 1,
    "metadata": {
        "component": {"type": "application", "bom-ref": ref(root), "name": "nodekeeper",
                      "version": version, "purl": ref(root),
                      "licenses": [{"expression": packages[root].get("license") or "Apache-2.0"}],
                      "properties": [{"name": "git:commit", "value": commit}]},
    },
    "components": components,
    "dependencies": [{"ref": ref(pid), "dependsOn": [ref(d) for d in edges[pid]]}
                     for pid in sorted(seen, key=ref)],
}
json.dump(bom, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
