// Whole-file checks of the TextMate grammar (the `# ^^^ scope` assertions live in
// test/grammar/*.tsr and run under vscode-tmgrammar-test): every example program tokenizes
// with no region leaking past a top-level definition, and nothing is marked invalid.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import * as oniguruma from 'vscode-oniguruma';
import * as vsctm from 'vscode-textmate';

const extRoot = path.resolve(__dirname, '..', '..');
const repoRoot = path.resolve(extRoot, '..', '..');

function tsrFiles(dir: string, skip: (name: string) => boolean = () => false): string[] {
    if (!fs.existsSync(dir)) {
        return [];
    }
    const out: string[] = [];
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const p = path.join(dir, entry.name);
        if (entry.isDirectory() && entry.name !== 'node_modules' && !entry.name.startsWith('.')) {
            out.push(...tsrFiles(p, skip));
        } else if (entry.isFile() && entry.name.endsWith('.tsr') && !skip(entry.name)) {
            out.push(p);
        }
    }
    return out.sort();
}

/** Sources the grammar must handle: the repo's examples and tests, and the shared corpus. */
function corpus(): string[] {
    const syntaxErrors = (name: string) => /^e010\d/.test(name); // unterminated strings etc.
    const corpusDir = process.env.TESSERA_CORPUS ?? path.resolve(repoRoot, '..', 'shared', 'corpus');
    return [
        ...tsrFiles(path.join(repoRoot, 'examples')),
        ...tsrFiles(path.join(repoRoot, 'tests'), syntaxErrors),
        ...tsrFiles(corpusDir, syntaxErrors),
    ];
}

let grammar: vsctm.IGrammar;

before(async () => {
    const wasm = fs.readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm'));
    await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
    const registry = new vsctm.Registry({
        onigLib: Promise.resolve({
            createOnigScanner: (sources: string[]) => new oniguruma.OnigScanner(sources),
            createOnigString: (s: string) => new oniguruma.OnigString(s),
        }),
        loadGrammar: async (scopeName: string) => {
            const file = { 'source.tessera': 'tessera.tmLanguage.json', 'source.tessera-ir': 'tessera-ir.tmLanguage.json' }[
                scopeName
            ];
            if (!file) {
                return null;
            }
            const p = path.join(extRoot, 'syntaxes', file);
            return vsctm.parseRawGrammar(fs.readFileSync(p, 'utf8'), p);
        },
    });
    const g = await registry.loadGrammar('source.tessera');
    assert.ok(g, 'grammar loads');
    grammar = g;
});

function tokenize(text: string): { line: string; tokens: vsctm.IToken[] }[] {
    let stack = vsctm.INITIAL;
    return text.split(/\r?\n/).map((line) => {
        const r = grammar.tokenizeLine(line, stack);
        stack = r.ruleStack;
        return { line, tokens: r.tokens };
    });
}

describe('grammar on whole programs', () => {
    const files = corpus();

    for (const file of files) {
        it(`tokenizes ${path.relative(repoRoot, file)}`, () => {
            const lines = tokenize(fs.readFileSync(file, 'utf8') + '\nAFTER_EOF = 1\n');
            lines.forEach(({ line, tokens }, n) => {
                for (const t of tokens) {
                    const bad = t.scopes.find((s) => s.startsWith('invalid.'));
                    assert.equal(bad, undefined, `${file}:${n + 1}: ${bad} at column ${t.startIndex + 1}: ${line}`);
                }
                // A top-level def/decorator starts at the top of the scope stack: no string,
                // bracket or signature region of an earlier line is still open.
                if (/^(def\s|@)/.test(line)) {
                    const first = tokens[0];
                    assert.ok(
                        first.scopes.length >= 2 && first.scopes[1].startsWith('meta.function'),
                        `${file}:${n + 1}: top-level line starts inside ${first.scopes.join(' ')}`,
                    );
                }
            });
            const last = lines[lines.length - 2];
            assert.deepEqual(last.tokens[0].scopes, ['source.tessera'], `${file}: a region is still open at the end`);
        });
    }
});

describe('grammar file', () => {
    it('covers the dtypes, aliases and policies of the language reference', () => {
        const text = fs.readFileSync(path.join(extRoot, 'syntaxes', 'tessera.tmLanguage.json'), 'utf8');
        const words = [
            'f64', 'f32', 'tf32', 'bf16', 'f16', 'fp8_e4m3', 'fp8_e5m2', 'int8', 'int4', 'i32', 'i64',
            'fp32', 'fp16', 'float32', 'float16', 'bfloat16', 'fp64', 'int32', 'int64', 'e4m3', 'e5m2',
            'accum', 'stochastic_round', 'loss_scale', 'saturate', 'fp32_master', 'paged', 'checkpointable',
            'rolling_window', 'INF', 'NAN',
        ];
        for (const w of words) {
            assert.match(text, new RegExp(`[|(:]${w}[|)\\\\]`), w);
        }
    });

    it('scopes every dtype in a type position', () => {
        const dtypes = 'f64 f32 tf32 bf16 f16 fp8_e4m3 fp8_e5m2 int8 int4 i32 i64 fp32 fp16 float32 float16 bfloat16 fp64 int32 int64 e4m3 e5m2';
        for (const d of dtypes.split(' ')) {
            const [{ tokens, line }] = tokenize(`x: Tensor["M", ${d} @accum(f32)]`);
            const tok = tokens.find((t) => line.substring(t.startIndex, t.endIndex) === d);
            assert.ok(tok, d);
            assert.ok(tok.scopes.includes('support.type.dtype.tessera'), `${d}: ${tok.scopes.join(' ')}`);
        }
    });
});
