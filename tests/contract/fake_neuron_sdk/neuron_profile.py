"""FAKE `neuron-profile` (contract tests only): `view --output-format summary-json -n X.neff -s X.ntff`
prints {"<neff name>": {flat metrics, total_time in seconds}} read from the fake NTFF."""

import json
import sys
from pathlib import Path


def main(argv):
    if (
        len(argv) != 7
        or argv[0] != "view"
        or argv[1] != "--output-format"
        or argv[3] != "-n"
        or argv[5] != "-s"
    ):
        print(
            "usage: neuron-profile view --output-format summary-json -n FILE.neff -s FILE.ntff",
            file=sys.stderr,
        )
        return 2
    if argv[2] != "summary-json":
        print(f"fake neuron-profile: output format {argv[2]!r} is not faked", file=sys.stderr)
        return 2
    neff, ntff = Path(argv[4]), Path(argv[6])
    if not neff.is_file() or not neff.read_bytes().startswith(b"FAKE-NEFF"):
        print(f"ERROR: cannot read NEFF {neff}", file=sys.stderr)
        return 1
    if not ntff.is_file():
        print(f"ERROR: cannot read NTFF {ntff}", file=sys.stderr)
        return 1
    metrics = json.loads(ntff.read_text())["metrics"]
    print(json.dumps({neff.stem: metrics}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
