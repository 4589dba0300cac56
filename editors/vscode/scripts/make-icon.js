#!/usr/bin/env node
// Draws the extension's icon, images/icon.png (128×128): a tessera mosaic, a 4×4 grid of
// tiles on a dark rounded square, the tiles of one 2×2 block lit as a kernel's tile is.
// Plain Node (zlib writes the PNG), so that the icon can be redrawn without an image tool:
//   node scripts/make-icon.js
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const SIZE = 128;
const BACKGROUND = [0x1e, 0x25, 0x33];
const TILE = [0x3b, 0x4a, 0x63];
const LIT = [[0x2e, 0xc4, 0xb6], [0x2a, 0xa8, 0xd8], [0x2a, 0xa8, 0xd8], [0xf2, 0xa1, 0x3b]];
const CORNER = 22; // radius of the background's corners
const MARGIN = 18;
const GAP = 6;
const CELL = (SIZE - 2 * MARGIN - 3 * GAP) / 4; // 17.5: tiles are anti-aliased at the edges

/** Coverage (0..1) of pixel (x, y) by a rounded rectangle, sampled 4×4 inside the pixel. */
function coverage(x, y, x0, y0, x1, y1, r) {
    let inside = 0;
    for (let sy = 0; sy < 4; sy++) {
        for (let sx = 0; sx < 4; sx++) {
            const px = x + (sx + 0.5) / 4;
            const py = y + (sy + 0.5) / 4;
            if (px < x0 || px > x1 || py < y0 || py > y1) continue;
            const cx = Math.min(Math.max(px, x0 + r), x1 - r);
            const cy = Math.min(Math.max(py, y0 + r), y1 - r);
            if ((px - cx) ** 2 + (py - cy) ** 2 <= r * r) inside++;
        }
    }
    return inside / 16;
}

const rgba = Buffer.alloc(SIZE * SIZE * 4);
for (let y = 0; y < SIZE; y++) {
    for (let x = 0; x < SIZE; x++) {
        const alpha = coverage(x, y, 0, 0, SIZE, SIZE, CORNER);
        let color = BACKGROUND;
        for (let row = 0; row < 4; row++) {
            for (let col = 0; col < 4; col++) {
                const x0 = MARGIN + col * (CELL + GAP);
                const y0 = MARGIN + row * (CELL + GAP);
                const c = coverage(x, y, x0, y0, x0 + CELL, y0 + CELL, 3);
                if (c === 0) continue;
                const lit = row >= 1 && row <= 2 && col >= 1 && col <= 2;
                const tile = lit ? LIT[(row - 1) * 2 + (col - 1)] : TILE;
                color = color.map((v, i) => Math.round(v * (1 - c) + tile[i] * c));
            }
        }
        const o = (y * SIZE + x) * 4;
        rgba[o] = color[0];
        rgba[o + 1] = color[1];
        rgba[o + 2] = color[2];
        rgba[o + 3] = Math.round(alpha * 255);
    }
}

function crc32(buf) {
    let c = ~0;
    for (const b of buf) {
        c ^= b;
        for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
    }
    return ~c >>> 0;
}

function chunk(type, data) {
    const head = Buffer.alloc(8);
    head.writeUInt32BE(data.length, 0);
    head.write(type, 4, 'ascii');
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
    return Buffer.concat([head, data, crc]);
}

const ihdr = Buffer.alloc(13);
ihdr.writeUInt32BE(SIZE, 0);
ihdr.writeUInt32BE(SIZE, 4);
ihdr[8] = 8; // bits per channel
ihdr[9] = 6; // RGBA
// Each row starts with filter type 0 (none).
const raw = Buffer.alloc(SIZE * (SIZE * 4 + 1));
for (let y = 0; y < SIZE; y++) rgba.copy(raw, y * (SIZE * 4 + 1) + 1, y * SIZE * 4, (y + 1) * SIZE * 4);
const png = Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw, { level: 9 })),
    chunk('IEND', Buffer.alloc(0)),
]);
const out = path.join(__dirname, '..', 'images', 'icon.png');
fs.writeFileSync(out, png);
console.log(`wrote ${path.relative(process.cwd(), out)} (${png.length} bytes)`);
