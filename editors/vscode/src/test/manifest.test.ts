// The extension manifest agrees with the code and with the brief it implements.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

const extRoot = path.resolve(__dirname, '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(extRoot, 'package.json'), 'utf8'));
const source = fs.readFileSync(path.join(extRoot, 'src', 'extension.ts'), 'utf8');

describe('package.json', () => {
    it('identifies the extension', () => {
        assert.equal(pkg.publisher, 'tessera-lang');
        assert.equal(pkg.name, 'tessera');
        assert.equal(pkg.displayName, 'Tessera');
        assert.equal(pkg.engines.vscode, '^1.82.0');
        assert.deepEqual(pkg.activationEvents, ['onLanguage:tessera']);
        assert.equal(pkg.main, './out/extension.js');
        assert.equal(pkg.license, 'Apache-2.0');
    });

    it('contributes the language and its grammar', () => {
        const lang = pkg.contributes.languages.find((l: { id: string }) => l.id === 'tessera');
        assert.deepEqual(lang.extensions, ['.tsr']);
        assert.equal(lang.icon, undefined);
        const grammar = pkg.contributes.grammars.find((g: { language: string }) => g.language === 'tessera');
        assert.equal(grammar.scopeName, 'source.tessera');
        for (const g of pkg.contributes.grammars) {
            const file = JSON.parse(fs.readFileSync(path.join(extRoot, g.path), 'utf8'));
            assert.equal(file.scopeName, g.scopeName);
        }
        for (const l of pkg.contributes.languages) {
            JSON.parse(fs.readFileSync(path.join(extRoot, l.configuration), 'utf8'));
        }
    });

    it('registers a handler for every contributed command, and contributes every handler', () => {
        const contributed = pkg.contributes.commands.map((c: { command: string }) => c.command).sort();
        const registered = [...source.matchAll(/registerCommand\('([^']+)'/g)].map((m) => m[1]).sort();
        assert.deepEqual(registered, contributed);
        for (const id of ['tessera.showLowering', 'tessera.exploreKernel', 'tessera.restartServer', 'tessera.explore', 'tessera.run']) {
            assert.ok(contributed.includes(id), id);
        }
        const titles = Object.fromEntries(
            pkg.contributes.commands.map((c: { command: string; category?: string; title: string }) => [
                c.command,
                `${c.category}: ${c.title}`,
            ]),
        );
        assert.equal(titles['tessera.showLowering'], 'Tessera: Show Lowering');
        assert.equal(titles['tessera.exploreKernel'], 'Tessera: Explore Kernel');
        assert.equal(titles['tessera.restartServer'], 'Tessera: Restart Server');
        assert.equal(titles['tessera.startServer'], 'Tessera: Start Server');
        assert.equal(titles['tessera.stopServer'], 'Tessera: Stop Server');
        assert.equal(titles['tessera.showServerVersion'], 'Tessera: Show Server Version');
        assert.equal(titles['tessera.showOutput'], 'Tessera: Show Server Log');
    });

    it('runs in untrusted workspaces without letting them choose the programs', () => {
        const trust = pkg.capabilities.untrustedWorkspaces;
        assert.equal(trust.supported, 'limited');
        assert.ok(trust.description.length > 20);
        const props = pkg.contributes.configuration.properties;
        // Every setting that names a program or its arguments is restricted.
        const programSettings = Object.keys(props).filter((k) => /\.(path|args)$/.test(k)).sort();
        assert.deepEqual([...trust.restrictedConfigurations].sort(), programSettings);
        assert.ok(programSettings.includes('tessera.server.path'));
        assert.equal(pkg.capabilities.virtualWorkspaces.supported, false);
    });

    it('has an icon: a 128×128 PNG shipped in the .vsix', () => {
        const png = fs.readFileSync(path.join(extRoot, pkg.icon));
        assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
        assert.equal(png.toString('ascii', 12, 16), 'IHDR');
        assert.equal(png.readUInt32BE(16), 128);
        assert.equal(png.readUInt32BE(20), 128);
        const ignore = fs.readFileSync(path.join(extRoot, '.vscodeignore'), 'utf8').split(/\r?\n/);
        assert.ok(!ignore.some((l) => l.startsWith('images')), 'images/ is packaged');
    });

    it('names its repository', () => {
        assert.deepEqual(pkg.repository, {
            type: 'git',
            url: 'https://github.com/tessera-lang/tessera',
            directory: 'editors/vscode',
        });
        assert.ok(!/--allow-missing-repository/.test(pkg.scripts.package));
    });

    it("contributes every custom modifier of the server's semantic tokens legend", () => {
        // The legend is built in lsp/src/convert.rs: the standard modifiers are LSP's
        // constants, the custom ones `SemanticTokenModifier::new("...")`.
        const convert = fs.readFileSync(path.join(extRoot, '..', '..', 'lsp', 'src', 'convert.rs'), 'utf8');
        const custom = [...convert.matchAll(/SemanticTokenModifier::new\("([^"]+)"\)/g)].map((m) => m[1]).sort();
        assert.ok(custom.includes('policy'), 'the server sends `policy`');
        const contributed = pkg.contributes.semanticTokenModifiers;
        assert.deepEqual(contributed.map((m: { id: string }) => m.id).sort(), custom);
        for (const m of contributed) {
            assert.ok(m.description.length > 10, m.id);
        }
        // Without a theme rule for it, a policy looks as the TextMate grammar colours it.
        const scopes = pkg.contributes.semanticTokenScopes.find((s: { language: string }) => s.language === 'tessera');
        const grammar = fs.readFileSync(path.join(extRoot, 'syntaxes', 'tessera.tmLanguage.json'), 'utf8');
        for (const [selector, names] of Object.entries(scopes.scopes as Record<string, string[]>)) {
            assert.match(selector, /^decorator\.policy$/);
            for (const name of names) {
                assert.ok(grammar.includes(`"${name}`), `${name} is a scope of the grammar`);
            }
        }
    });

    it('declares every setting the code reads, with the documented defaults', () => {
        const props = pkg.contributes.configuration.properties;
        const read = [...source.matchAll(/get<[^>]+>\('([^']+)'/g)].map((m) => `tessera.${m[1]}`);
        assert.ok(read.length > 0);
        for (const key of read) {
            assert.ok(props[key], `setting ${key} is read but not declared`);
        }
        assert.equal(props['tessera.server.path'].default, 'tessera');
        assert.deepEqual(props['tessera.server.args'].default, ['lsp']);
        assert.equal(props['tessera.explore.path'].default, 'tessera-explore');
        assert.equal(props['tessera.target'].default, 'sm_90');
        assert.deepEqual(props['tessera.target'].enum.sort(), ['cpu', 'sm_80', 'sm_90']);
        assert.ok(props['tessera.trace.server']);
    });

    it('keeps sources and tests out of the .vsix', () => {
        const ignore = fs.readFileSync(path.join(extRoot, '.vscodeignore'), 'utf8');
        for (const entry of ['src/**', 'test/**', 'out/**', 'tsconfig.json', 'node_modules/**', 'scripts/**']) {
            assert.ok(ignore.split(/\r?\n/).includes(entry), entry);
        }
    });
});

describe('language-configuration.json', () => {
    const conf = JSON.parse(fs.readFileSync(path.join(extRoot, 'language-configuration.json'), 'utf8'));
    const increase = new RegExp(conf.indentationRules.increaseIndentPattern);
    const onEnter = conf.onEnterRules.map((r: { beforeText: string; action: { indent: string } }) => ({
        re: new RegExp(r.beforeText),
        indent: r.action.indent,
    }));
    const indentsAfter = (line: string) => onEnter.some((r: { re: RegExp; indent: string }) => r.indent === 'indent' && r.re.test(line));

    it('indents after a line ending in a colon', () => {
        for (const line of [
            'def gemm(A: Tensor["M", "K", bf16]) -> Tensor["M", "K", f32]:',
            '    for k0 in tile.range(0, K, ctx.BK):',
            '        if causal:  # mask',
            'else:',
            '    with device(gpu):',
        ]) {
            assert.ok(increase.test(line), line);
            assert.ok(indentsAfter(line), line);
        }
    });

    it('does not indent after other lines', () => {
        for (const line of ['x = a[1:2]', '# note:', 'y = 1  # see:', '    return C', '']) {
            assert.ok(!increase.test(line), line);
            assert.ok(!indentsAfter(line), line);
        }
    });

    it('uses # comments, brackets and indentation folding', () => {
        assert.equal(conf.comments.lineComment, '#');
        assert.deepEqual(conf.brackets, [
            ['{', '}'],
            ['[', ']'],
            ['(', ')'],
        ]);
        assert.equal(conf.folding.offSide, true);
    });

    it('has a word pattern that splits on dots and brackets', () => {
        const words = 'tile.load(A[m0:m0 + 128], x_1)'.match(new RegExp(conf.wordPattern, 'g'));
        assert.deepEqual(words, ['tile', 'load', 'A', 'm0', 'm0', '128', 'x_1']);
    });
});
