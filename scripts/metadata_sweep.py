#!/usr/bin/env python3
"""Model metadata at its edges: sets every scalar numeric metadata key of a GGUF file, one at a
time, to edge values (0, 1, 2^31 - 1, 2^32 - 1, NaN, +-inf, ...), runs kvserve on each copy and
reports every run that crashed (a signal) or printed a sanitizer report. Any other outcome (a
clear error, or output) passes: bad input must get a clear error and change nothing else.

  scripts/metadata_sweep.py KVSERVE MODEL.gguf [MODEL.gguf ...] [--command generate|plan|inspect]
                            [--arrays]

Values are patched in place (same type, same size), so the rest of the file stays valid. Use an
ASan + UBSan build (scripts/build.sh asan -> build-asan/tools/kvserve) to see undefined behaviour
too. docs/reliability.md has the last run.
"""
import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FORMATS = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 10: '<Q', 11: '<q',
           12: '<d'}
INT_VALUES = [0, 1, 2, 3, 5, 7, 64, 1000, 65535, 2**31 - 1, 2**32 - 1]
FLOAT_VALUES = [0.0, -1.0, 1e-30, 1e30, math.nan, math.inf, -math.inf]


def scalar_keys(data, arrays=False):
    """{key: (type, offset)} of the scalar numeric metadata (not bools, strings or arrays); with
    arrays, also the first, middle and last element of each numeric array as 'key[i]'."""
    magic, _version, _tensors, count = struct.unpack_from('<IIQQ', data, 0)
    if magic != 0x46554747:
        raise ValueError('not a GGUF file')
    off, out = 24, {}
    for _ in range(count):
        (n,) = struct.unpack_from('<Q', data, off)
        key = data[off + 8:off + 8 + n].decode()
        off += 8 + n
        (t,) = struct.unpack_from('<I', data, off)
        off += 4
        if t in SIZES:
            if t != 7:
                out[key] = (t, off)
            off += SIZES[t]
        elif t == 8:
            (n,) = struct.unpack_from('<Q', data, off)
            off += 8 + n
        elif t == 9:
            et, cnt = struct.unpack_from('<IQ', data, off)
            off += 12
            if et == 8:
                for _ in range(cnt):
                    (n,) = struct.unpack_from('<Q', data, off)
                    off += 8 + n
            else:
                if arrays and et != 7 and cnt > 0:
                    for i in sorted({0, cnt // 2, cnt - 1}):
                        out[f'{key}[{i}]'] = (et, off + SIZES[et] * i)
                off += SIZES[et] * cnt
        else:
            raise ValueError(f'metadata type {t} of {key}')
    return out


def patched(data, t, off, value):
    fmt = FORMATS[t]
    if t in (6, 12):
        v = float(value)
    else:
        bits = 8 * SIZES[t]
        v = int(value) & ((1 << bits) - 1)
        if fmt[1].islower() and v >= 1 << (bits - 1):  # signed types: the same bits
            v -= 1 << bits
    out = bytearray(data)
    struct.pack_into(fmt, out, off, v)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('kvserve')
    p.add_argument('models', nargs='+')
    p.add_argument('--command', default='generate', choices=['generate', 'plan', 'inspect'])
    p.add_argument('--arrays', action='store_true',
                   help='also the first, middle and last element of each numeric array')
    args = p.parse_args()
    failures = runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'm.gguf')
        for model in args.models:
            data = open(model, 'rb').read()
            for key, (t, off) in scalar_keys(data, args.arrays).items():
                for value in FLOAT_VALUES if t in (6, 12) else INT_VALUES:
                    with open(path, 'wb') as f:
                        f.write(patched(data, t, off, value))
                    cmd = {'generate': [args.kvserve, 'generate', path, '-p', 'Hello there',
                                        '-n', '3', '--temp', '0', '--max-model-len', '256'],
                           'plan': [args.kvserve, 'plan', '--model', path, '--gpu', 'h200'],
                           'inspect': [args.kvserve, 'inspect', path]}[args.command]
                    try:
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                           errors='replace')
                        rc, text = r.returncode, r.stdout + r.stderr
                    except subprocess.TimeoutExpired:
                        rc, text = 'timeout', ''
                    runs += 1
                    if rc == 'timeout' or rc < 0 or rc >= 128 or 'runtime error' in text or \
                            'AddressSanitizer' in text:
                        failures += 1
                        last = ' '.join(text.strip().splitlines()[-2:])[:300]
                        print(f'FAIL {os.path.basename(model)} {key}={value}: rc={rc} {last}')
    print(f'{runs} runs, {failures} crashed or reported undefined behaviour')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
