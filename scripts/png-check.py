#!/usr/bin/env python3
"""Checks that rendered report pages are the whole report (render-report.sh runs it):
   png-check.py HEIGHT PAGE.png...   (pages in order)
The pages' heights must add up to HEIGHT, the report's height as Chromium measured it, and the
report's last content must be render-report.sh's end marker (a bar of #ff00ff): below it only
rows of the background's one colour, on the last page or running onto it from the one before.
Exit 0 and one line when whole; exit 1 naming what is missing. Reads PNG with the standard
library only (8-bit RGB or RGBA, as Chromium writes it)."""
import re
import struct
import sys
import zlib

MARKER = (0xFF, 0x00, 0xFF)


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"png-check: {path} is not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                sys.exit(f"png-check: {path}: bit depth {depth}, colour type {colour} not read here")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, channels, zlib.decompress(idat)


def rows(width, height, channels, raw, first):
    """Unfiltered rows from `first` to the end."""
    stride = width * channels
    prev = bytearray(stride)
    out = []
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y >= first:
            out.append(bytes(line))
        prev = line
    return out


def main():
    height, pages = int(sys.argv[1]), sys.argv[2:]
    pages.sort(key=lambda p: int(re.search(r"-(\d+)\.png$", p).group(1)))
    total = 0
    for p in pages:
        total += read_png(p)[1]
    if total != height:
        sys.exit(f"png-check: the report is cut: its pages hold {total} px of its {height}")
    # From the report's end upwards, past the rows of one colour (the page's background below
    # its content, which may run onto a page of its own): the first row with anything on it must
    # be the end marker's.
    for n, page in enumerate(reversed(pages)):
        width, h, channels, raw = read_png(page)
        for line in reversed(rows(width, h, channels, raw, 0)):
            pixels = {bytes(line[x:x + 3]) for x in range(0, len(line) - 2, channels)}
            if len(pixels) == 1 and bytes(MARKER) not in pixels:
                continue
            if bytes(MARKER) in pixels:
                on = "the last page" if n == 0 else f"page {len(pages) - n}, blank after it"
                print(f"png-check: whole: {len(pages)} page(s), {total} px, the end marker on {on}")
                return
            sys.exit(f"png-check: the report is cut: its last content ({page}) is not its end marker")
    sys.exit(f"png-check: the report is cut: the last page ({pages[-1]}) does not show its end")


main()
