#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`kvtier bench --nodes`: the fleet simulator, small.

A synthetic chat workload over one node and two, with small capacities so
that every source serves hits (device, primary, disk and, routed
cache-aware with peers, the other node). Checks what the simulator
promises: with --sync the hits are the same on every run; every loaded
chunk held the stored bytes; cache-aware routing with peers finds at least
what round-robin without peers does, its peer hits crossed the network;
the JSON and the plot are written; bad options are usage errors.

Usage: test-fleet-bench.py KVTIER
"""

import json
import os
import subprocess
import sys
import tempfile

KVTIER = sys.argv[1]
ARGS = ["--nodes", "1,2", "--router", "round-robin/no-peers,cache-aware",
        "--synthetic", "--requests", "200", "--chunk-size", "8KiB",
        "--gpu-size", "256KiB", "--primary-size", "1MiB", "--tier-size", "4MiB",
        "--sync", "--quiet"]

failures = []


def check(name, ok):
    if not ok:
        failures.append(name)


def run(extra, tmp, name):
    out = os.path.join(tmp, name + ".json")
    result = subprocess.run([KVTIER, "bench", *ARGS, *extra, "--json", out],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"kvtier bench {' '.join(ARGS + extra)} failed ({result.returncode}):\n"
                 f"{result.stderr}")
    with open(out) as f:
        return json.load(f)


with tempfile.TemporaryDirectory() as tmp:
    plot = os.path.join(tmp, "fleet.svg")
    first = run(["--plot", plot], tmp, "first")
    second = run([], tmp, "second")
    runs = {(r["nodes"], r["router"], r["peers"]): r for r in first["runs"]}

    check("one run per fleet size and policy (one for one node)",
          sorted(runs) == [(1, "round-robin", False), (2, "cache-aware", True),
                           (2, "round-robin", False)])
    check("--sync: the same hits on every run",
          [r["hits"] for r in first["runs"]] == [r["hits"] for r in second["runs"]])
    for r in first["runs"]:
        name = f"{r['nodes']} nodes, {r['router']}"
        check(f"{name}: every request served", r["requests"] == 200 and r["skipped"] == 0)
        check(f"{name}: loaded chunks checked and right",
              r["verified_chunks"] > 0 and r["verify_mismatches"] == 0)
        hits = sum(r["hits"].values())
        check(f"{name}: hit rate is hits / chunks",
              abs(r["hit_rate"] - hits / r["chunks"]) < 1e-9)

    one = runs[(1, "round-robin", False)]
    rr = runs[(2, "round-robin", False)]
    ca = runs[(2, "cache-aware", True)]
    check("one node: no peer hits, no cross-node bytes",
          one["hits"]["peer"] == 0 and one["cross_node_bytes"] == 0)
    check("one node: device, primary and disk all served hits",
          all(one["hits"][s] > 0 for s in ("device", "primary", "disk")))
    check("round-robin without peers fetches nothing across nodes",
          rr["hits"]["peer"] == 0 and rr["cross_node_bytes"] == 0)
    check("cache-aware with peers fetches from the other node",
          ca["hits"]["peer"] > 0 and ca["cross_node_bytes"] >= ca["hits"]["peer"] * 8192)
    check("cache-aware with peers finds more than round-robin without",
          sum(ca["hits"].values()) > sum(rr["hits"].values()))
    check("the baseline ratio is against one node",
          abs(ca["hits_vs_one_node"] - sum(ca["hits"].values()) / sum(one["hits"].values())) < 1e-9)
    check("imbalance is max / mean requests per node",
          abs(ca["imbalance"] - ca["max_requests_per_node"] / (ca["requests"] / 2)) < 1e-9)
    check("the plot is an SVG", os.path.getsize(plot) > 0 and open(plot).read(5) == "<?xml")

for bad in (["--nodes", "0"], ["--nodes", "2", "--router", "random"],
            ["--nodes", "2", "--router", "cache-aware/sideways"]):
    result = subprocess.run([KVTIER, "bench", *bad], capture_output=True, text=True, timeout=60)
    check(f"{' '.join(bad)}: a usage error", result.returncode == 2 and "--" in result.stderr)

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print("all checks passed")
