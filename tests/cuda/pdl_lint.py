#!/usr/bin/env python3
"""Every cuda kernel enters through ty_pdl_enter() (kernels/common.cuh).

With TRAINYARD_CUDA_PDL the executor launches a kernel that follows another
kernel as its programmatic dependent: it may start while its predecessor
still runs, and only griddepcontrol.wait (the first thing ty_pdl_enter
does) makes the predecessor's writes visible. A kernel that read or wrote
anything before that call would race. This check finds every
`extern "C" __global__` definition under backends/cuda/kernels and fails
naming each one whose body does not begin with the call.

  pdl_lint.py KERNELS_DIR
"""
import pathlib
import re
import sys


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    bad, seen = [], 0
    for path in sorted(list(root.glob("*.cu")) + list(root.glob("*.cuh"))):
        text = path.read_text()
        for m in re.finditer(r'extern "C" __global__', text):
            # the body's brace: the first '{' after the declaration's ')'
            brace = text.find("{", m.end())
            semi = text.find(";", m.end())
            if brace < 0 or (0 <= semi < brace):
                continue  # a declaration, not a definition
            seen += 1
            body = re.sub(r"[\s\\]+", " ", text[brace + 1:brace + 200]).lstrip()
            if not body.startswith("ty_pdl_enter();"):
                line = text.count("\n", 0, m.start()) + 1
                head = re.sub(r"[\s\\]+", " ", text[m.start():brace])[:90]
                bad.append(f"{path.name}:{line}: {head} ... does not start with ty_pdl_enter();")
    for b in bad:
        print(b)
    print(f"{seen} kernel definitions, {len(bad)} without ty_pdl_enter() first")
    return 1 if bad or seen == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
