#!/usr/bin/env node
// A stand-in for `tessera lsp` that speaks just enough of the protocol (the tools spec's
// language-server section, and the editor contract in editors/README.md) to drive the
// editor integrations headlessly: initialize/shutdown, document sync, code lenses with the
// `tessera.explore` / `tessera.run` commands, `tessera/kernels` and `tessera/lowering`.
// It finds kernels with a regular expression; the IR it returns is fake but has a real
// source map. Every message it receives is appended, one JSON object a line, to the file
// named by $FAKE_LSP_LOG (when set), so tests can check what the client sent.
//
// Its command line is checked as strictly as the real server's (lsp/src/launch.rs): the
// flags LSP clients append (`--stdio`, `--clientProcessId N` / `--clientProcessId=N`) are
// accepted, `--version` prints a version, anything else ends it with exit status 2, so a
// client that launches the server with arguments the real one refuses fails here too.
//
// No dependencies: plain Node (>= 16).
'use strict';

const fs = require('fs');

/** The error for a command line the real server would refuse, or undefined when it is fine. */
function badArgument(args) {
    for (let i = 0; i < args.length; i++) {
        const a = args[i];
        if (a === '--stdio') continue;
        if (a === '--clientProcessId' && /^\d+$/.test(args[i + 1] || '')) {
            i++;
            continue;
        }
        if (/^--clientProcessId=\d+$/.test(a)) continue;
        return `unexpected argument \`${a}\``;
    }
    return undefined;
}

if (process.argv.slice(2).some((a) => a === '--version' || a === '-V')) {
    // As `tessera-lsp --version` answers, for the clients' "show version" commands.
    process.stdout.write('fake-tessera-lsp 0.0.0\n');
    process.exit(0);
}
const refused = badArgument(process.argv.slice(2));
if (refused !== undefined) {
    process.stderr.write(`fake-lsp: ${refused}\nUsage: fake-lsp.js [--stdio] [--clientProcessId <PID>]\n`);
    process.exit(2);
}

const logFile = process.env.FAKE_LSP_LOG;
const docs = new Map(); // uri -> text

function log(obj) {
    if (logFile) {
        fs.appendFileSync(logFile, JSON.stringify(obj) + '\n');
    }
}

function send(msg) {
    const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...msg }), 'utf8');
    process.stdout.write(`Content-Length: ${body.length}\r\n\r\n`);
    process.stdout.write(body);
}

/** Decorated top-level defs: [{name, kind, range}] with the range over the whole definition. */
function kernels(text) {
    const lines = text.split(/\r?\n/);
    const out = [];
    let first = -1;
    let kind;
    for (let i = 0; i < lines.length; i++) {
        const line = lines[i];
        const dec = /^@\s*(?:[A-Za-z_]\w*\.)?(kernel(?:\.[A-Za-z_]\w*)?|jit|autodiff)\b/.exec(line);
        if (dec) {
            if (first < 0) first = i;
            if (!kind) kind = dec[1];
            continue;
        }
        if (/^\s/.test(line) && first >= 0 && !/^def/.test(line)) {
            continue; // continuation of a multi-line decorator
        }
        const def = /^def\s+([A-Za-z_]\w*)/.exec(line);
        if (def && kind) {
            let end = i;
            for (let j = i + 1; j < lines.length; j++) {
                if (/^\S/.test(lines[j])) break;
                if (lines[j].trim() !== '') end = j;
            }
            out.push({
                name: def[1],
                kind,
                range: { start: { line: first, character: 0 }, end: { line: end, character: lines[end].length } },
                nameRange: {
                    start: { line: i, character: 4 },
                    end: { line: i, character: 4 + def[1].length },
                },
            });
        }
        if (line.trim() !== '' && !line.startsWith('#')) {
            first = -1;
            kind = undefined;
        }
    }
    return out;
}

function lowering(params) {
    const text = docs.get(params.uri);
    if (text === undefined) {
        throw { code: -32602, message: `unknown document: ${params.uri}` };
    }
    if (/^\s*#\s*fake-lsp:\s*errors/m.test(text)) {
        throw { code: -32803, message: 'the file has errors: fix them before lowering' };
    }
    const k = kernels(text).find((x) => x.name === params.kernel);
    if (!k) {
        throw { code: -32602, message: `unknown kernel: ${params.kernel}` };
    }
    const target = params.target || 'sm_90';
    const file = params.uri.replace(/^.*\//, '');
    const lines = text.split(/\r?\n/);
    const irLines = [`// ${params.stage} IR of ${params.kernel} for ${target}`, `func @${params.kernel} {`];
    const sourceMap = [];
    for (let l = k.nameRange.start.line + 1; l <= k.range.end.line; l++) {
        const src = lines[l];
        if (src.trim() === '' || src.trim().startsWith('#')) continue;
        const col = src.length - src.trimStart().length;
        sourceMap.push({
            irLine: irLines.length,
            range: { start: { line: l, character: col }, end: { line: l, character: src.length } },
        });
        irLines.push(`  %${irLines.length - 2} = fake.op ${JSON.stringify(src.trim())} loc("${file}":${l + 1}:${col + 1})`);
    }
    irLines.push('}');
    return { kernel: params.kernel, stage: params.stage, target, text: irLines.join('\n') + '\n', sourceMap };
}

function handle(msg) {
    log(msg);
    const { id, method, params } = msg;
    const reply = (result) => send({ id, result });
    switch (method) {
        case 'initialize':
            return reply({
                capabilities: {
                    textDocumentSync: { openClose: true, change: 1, save: { includeText: false } },
                    codeLensProvider: { resolveProvider: false },
                    documentSymbolProvider: true,
                    // Lists the client-side commands too: a client must still handle them itself.
                    executeCommandProvider: { commands: ['tessera.explore', 'tessera.run'] },
                },
                serverInfo: { name: 'fake-tessera-lsp', version: '0.0.0' },
            });
        case 'initialized':
        case '$/setTrace':
        case 'workspace/didChangeConfiguration':
        case 'workspace/didChangeWatchedFiles':
        case 'textDocument/didSave':
            return undefined;
        case 'textDocument/didOpen':
            docs.set(params.textDocument.uri, params.textDocument.text);
            return undefined;
        case 'textDocument/didChange':
            docs.set(params.textDocument.uri, params.contentChanges[params.contentChanges.length - 1].text);
            return undefined;
        case 'textDocument/didClose':
            docs.delete(params.textDocument.uri);
            return undefined;
        case 'textDocument/codeLens': {
            const uri = params.textDocument.uri;
            const ks = kernels(docs.get(uri) || '');
            return reply(
                ks.flatMap((k) => [
                    { range: k.nameRange, command: { title: '▶ Explore', command: 'tessera.explore', arguments: [uri, k.name] } },
                    { range: k.nameRange, command: { title: '⚡ Run', command: 'tessera.run', arguments: [uri, k.name] } },
                ]),
            );
        }
        case 'textDocument/documentSymbol':
            return reply(
                kernels(docs.get(params.textDocument.uri) || '').map((k) => ({
                    name: k.name,
                    detail: k.kind,
                    kind: 12,
                    range: k.range,
                    selectionRange: k.nameRange,
                })),
            );
        case 'tessera/kernels':
            return reply(kernels(docs.get(params.uri) || '').map(({ name, kind, range }) => ({ name, kind, range })));
        case 'tessera/lowering':
            try {
                return reply(lowering(params));
            } catch (e) {
                return send({ id, error: { code: e.code || -32603, message: e.message || String(e) } });
            }
        case 'shutdown':
            return reply(null);
        case 'exit':
            process.exit(0);
            return undefined;
        default:
            if (id !== undefined && method !== undefined) {
                return send({ id, error: { code: -32601, message: `method not found: ${method}` } });
            }
            return undefined;
    }
}

let buffer = Buffer.alloc(0);
process.stdin.on('data', (chunk) => {
    buffer = Buffer.concat([buffer, chunk]);
    for (;;) {
        const sep = buffer.indexOf('\r\n\r\n');
        if (sep < 0) return;
        const header = buffer.subarray(0, sep).toString('ascii');
        const m = /Content-Length:\s*(\d+)/i.exec(header);
        if (!m) {
            buffer = buffer.subarray(sep + 4);
            continue;
        }
        const len = Number(m[1]);
        if (buffer.length < sep + 4 + len) return;
        const body = buffer.subarray(sep + 4, sep + 4 + len).toString('utf8');
        buffer = buffer.subarray(sep + 4 + len);
        handle(JSON.parse(body));
    }
});
process.stdin.on('end', () => process.exit(0));
