"""merge_results.py DIR OUT — every test's JSON in DIR (NAME.json) into one file OUT, keyed by NAME:
what run_tests.sh and run_two_gpus.sh leave beside their summaries."""
import glob
import json
import os
import sys

merged = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    with open(p) as f:
        merged[os.path.basename(p)[:-5]] = json.load(f)
with open(sys.argv[2], "w") as f:
    json.dump(merged, f, indent=1)
