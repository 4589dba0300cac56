// Activates the compiled extension (out/extension.js) under Node with a stub `vscode` module
// (./vscode-stub.js) and the real vscode-languageclient, against editors/test/fake-lsp.js:
// the client starts, the server's code-lens commands do not clash with the extension's,
// Show Lowering fetches the IR into a `tessera-ir:` document, Explore/Run send properly
// quoted command lines to a terminal, a save re-lowers, errors reach the user.
// Not a VS Code: the UI is recorded, not drawn. Run after `tsc -p .`.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { after, before, describe, it } = require('node:test');

const { install, vscode, stub } = require('./vscode-stub');
install();

const extRoot = path.resolve(__dirname, '..', '..');
const fakeServer = path.resolve(extRoot, '..', 'test', 'fake-lsp.js');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tessera it's here "));
const file = path.join(dir, 'gemm kernels.tsr');
const source = [
    '@kernel.autotune(space=dict(BM=[64, 128]))',
    'def gemm(A: Tensor["M", "K", bf16], C: Tensor["M", "K", f32]):',
    '    ctx = tile.context()',
    '    C[0:1, 0:1] = tile.zeros((1, 1), f32)',
    '',
    '@jit',
    'def graph_fn(x: Tensor["n", f32]) -> Tensor["n", f32]:',
    '    return x + 1.0',
    '',
].join('\n');
fs.writeFileSync(file, source);
const doc = stub.makeDocument(vscode.Uri.file(file), 'tessera', source);
stub.textDocuments.push(doc);

const context = { subscriptions: [], extensionPath: extRoot, asAbsolutePath: (p) => path.join(extRoot, p) };
let ext;
let api;

before(async () => {
    stub.settings.set('tessera.server.path', process.execPath);
    stub.settings.set('tessera.server.args', [fakeServer]);
    stub.settings.set('tessera.explore.path', '/opt/tessera tools/tessera-explore');
    stub.settings.set('tessera.cli.path', '/opt/tessera tools/tessera');
    stub.settings.set('tessera.run.args', ['--dims', 'M=64,K=64']);
    ext = require(path.join(extRoot, 'out', 'extension.js'));
    api = await ext.activate(context);
});

after(async () => {
    await ext.deactivate();
    for (const d of context.subscriptions) {
        d.dispose();
    }
    fs.rmSync(dir, { recursive: true, force: true });
});

describe('extension under a stub VS Code', () => {
    it('activates, starts the client and registers every command', () => {
        const errors = stub.calls.filter((c) => c[0] === 'showErrorMessage');
        assert.deepEqual(errors, [], 'no error shown at start');
        for (const id of ['tessera.showLowering', 'tessera.exploreKernel', 'tessera.runKernel', 'tessera.startServer', 'tessera.stopServer', 'tessera.restartServer', 'tessera.showServerVersion', 'tessera.showOutput', 'tessera.explore', 'tessera.run']) {
            assert.ok(stub.commands.has(id), id);
        }
    });

    it('shows the server state in the status bar; a click shows the log', () => {
        assert.equal(stub.statusBarItems.length, 1);
        const item = stub.statusBarItems[0];
        assert.ok(item.visible);
        assert.equal(item.text, '$(check) Tessera');
        assert.equal(item.command, 'tessera.showOutput');
        assert.equal(item.backgroundColor, undefined);
        assert.match(item.tooltip, /^Tessera language server: ready \(fake-tessera-lsp 0\.0\.0\)$/m);
        assert.equal(ext.status, undefined, 'the API is what activate returned, not a module export');
        assert.equal(api.status.state, 'ready');
        assert.equal(api.initializeResult.serverInfo.name, 'fake-tessera-lsp');
    });

    it('traces the protocol in its own output channel', () => {
        assert.deepEqual([...stub.outputChannels].sort(), ['Tessera Language Server', 'Tessera Language Server Trace']);
    });

    it('Show Lowering: the IR of the chosen stage in a tessera-ir: document beside the source', async () => {
        stub.answers.quickPick = (items) => items.find((i) => i.stage === 'tile');
        await vscode.commands.executeCommand('tessera.showLowering', doc.uri.toString(), 'gemm');
        const errors = stub.calls.filter((c) => c[0] === 'showErrorMessage');
        assert.deepEqual(errors, []);
        const shown = stub.calls.filter((c) => c[0] === 'showTextDocument').pop();
        assert.ok(shown, 'a document was shown');
        const [, irDoc, options] = shown;
        assert.equal(irDoc.uri.scheme, 'tessera-ir');
        assert.equal(irDoc.languageId, 'tessera-ir');
        assert.equal(options.viewColumn, vscode.ViewColumn.Beside);
        const text = irDoc.getText();
        assert.match(text, /^\/\/ tile IR of gemm for sm_90\nfunc @gemm \{\n/);
        assert.match(text, /tile\.context\(\)/);
        // The stage quick pick offered every stage.
        const pick = stub.calls.filter((c) => c[0] === 'showQuickPick').pop();
        assert.deepEqual(
            pick[1].map((i) => i.stage),
            ['graph', 'sched', 'tile', 'target', 'all'],
        );
    });

    it('a save of the source re-lowers the open preview', async () => {
        const irDoc = stub.textDocuments.find((d) => d.uri.scheme === 'tessera-ir');
        const provider = stub.contentProviders.get('tessera-ir');
        let changed;
        const sub = provider.onDidChange((uri) => {
            changed = uri;
        });
        // What the server sees changes: edit the document as VS Code would, then save.
        const newText = source.replace('    ctx = tile.context()', '    ctx = tile.context()\n    acc = 2.0');
        doc.getText = () => newText;
        // didChange is sent by the client on change events; the fake server also re-reads on
        // didOpen, so re-open to sync the new text, then fire the save handler.
        await vscode.commands.executeCommand('tessera.restartServer');
        // Every save listener (the extension's and the client's) sees the save.
        for (const c of stub.calls.filter((x) => x[0] === 'workspace.onDidSaveTextDocument')) {
            await c[1](doc);
        }
        await new Promise((r) => setTimeout(r, 200));
        sub.dispose();
        assert.equal(changed && changed.toString(), irDoc.uri.toString(), 'the preview changed');
        const fresh = await provider.provideTextDocumentContent(irDoc.uri);
        assert.match(fresh, /acc = 2\.0/);
    });

    it('lowering errors are shown, not thrown', async () => {
        await vscode.commands.executeCommand('tessera.showLowering', doc.uri.toString(), 'no_such_kernel');
        const err = stub.calls.filter((c) => c[0] === 'showErrorMessage').pop();
        assert.ok(err, 'an error message');
        assert.match(err[1], /unknown kernel: no_such_kernel/);
    });

    it('▶ Explore (code lens) runs the explorer in a terminal, quoted for the shell', async () => {
        await vscode.commands.executeCommand('tessera.explore', doc.uri.toString(), 'gemm');
        const t = stub.terminals.pop();
        assert.equal(t.name, 'Explore gemm');
        const q = (s) => `'${s.replace(/'/g, `'\\''`)}'`;
        assert.deepEqual(t.sent, [`${q('/opt/tessera tools/tessera-explore')} ${q(file)} --kernel gemm`]);
    });

    it('⚡ Run (code lens) runs `tessera run` with the configured arguments', async () => {
        await vscode.commands.executeCommand('tessera.run', doc.uri.toString(), 'graph_fn');
        const t = stub.terminals.pop();
        const q = (s) => `'${s.replace(/'/g, `'\\''`)}'`;
        assert.deepEqual(t.sent, [`${q('/opt/tessera tools/tessera')} run ${q(file)} --kernel graph_fn --dims M=64,K=64`]);
    });

    it('Explore Kernel from the palette asks for the kernel when the cursor is outside all', async () => {
        stub.answers.quickPick = (items) => items.find((i) => i.label === 'graph_fn');
        const blank = doc.getText().split('\n').indexOf('@jit') - 1; // between the two kernels
        const editor = { document: doc, selection: { active: new vscode.Position(blank, 0) } };
        vscode.window.activeTextEditor = editor;
        await vscode.commands.executeCommand('tessera.exploreKernel');
        vscode.window.activeTextEditor = undefined;
        const pick = stub.calls.filter((c) => c[0] === 'showQuickPick').pop();
        assert.deepEqual(
            pick[1].map((i) => i.label),
            ['gemm', 'graph_fn'],
        );
        const t = stub.terminals.pop();
        assert.match(t.sent[0], /--kernel graph_fn$/);
    });

    it('Explore Kernel uses the kernel under the cursor without asking', async () => {
        const before = stub.calls.filter((c) => c[0] === 'showQuickPick').length;
        vscode.window.activeTextEditor = { document: doc, selection: { active: new vscode.Position(2, 6) } };
        await vscode.commands.executeCommand('tessera.exploreKernel');
        vscode.window.activeTextEditor = undefined;
        assert.equal(stub.calls.filter((c) => c[0] === 'showQuickPick').length, before, 'no quick pick');
        assert.match(stub.terminals.pop().sent[0], /--kernel gemm$/);
    });

    it('Stop Server and Start Server, with the status bar following', async () => {
        const item = stub.statusBarItems[0];
        const seen = [];
        const sub = api.onDidChangeStatus((s) => seen.push(s.state));
        await vscode.commands.executeCommand('tessera.stopServer');
        assert.equal(item.text, '$(debug-stop) Tessera');
        assert.equal(item.backgroundColor.id, 'statusBarItem.warningBackground');
        await vscode.commands.executeCommand('tessera.showLowering', doc.uri.toString(), 'gemm');
        const err = stub.calls.filter((c) => c[0] === 'showErrorMessage').pop();
        assert.match(err[1], /not running \(see "Tessera: Start Server"\)/);
        await vscode.commands.executeCommand('tessera.startServer');
        sub.dispose();
        assert.equal(item.text, '$(check) Tessera');
        assert.deepEqual(seen, ['stopped', 'starting', 'ready']);
    });

    it('Show Server Version runs the configured server with --version', async () => {
        const message = await vscode.commands.executeCommand('tessera.showServerVersion');
        assert.equal(message, `fake-tessera-lsp 0.0.0 (\`${process.execPath} ${fakeServer} --version\`)`);
        const info = stub.calls.filter((c) => c[0] === 'showInformationMessage').pop();
        assert.equal(info[1], `Tessera: ${message}`);
    });

    it('a server that refuses its command line: its own reason is shown, the status bar turns red', async () => {
        stub.settings.set('tessera.server.args', [fakeServer, '--socket=5000']);
        const before = stub.calls.length;
        await vscode.commands.executeCommand('tessera.restartServer');
        const errors = stub.calls.slice(before).filter((c) => c[0] === 'showErrorMessage').map((c) => c[1]);
        assert.ok(
            errors.some((e) => /could not start the language server .*: fake-lsp: unexpected argument `--socket=5000`/.test(e)),
            errors.join('\n'),
        );
        // Not restarted: a server that refuses its command line would only refuse it again.
        assert.ok(!errors.some((e) => /crashed|Restarting server failed/.test(e)), errors.join('\n'));
        const item = stub.statusBarItems[0];
        assert.equal(item.text, '$(error) Tessera');
        assert.equal(item.backgroundColor.id, 'statusBarItem.errorBackground');
        assert.equal(api.status.state, 'error');
        stub.settings.set('tessera.server.args', [fakeServer]);
        await vscode.commands.executeCommand('tessera.restartServer');
        assert.equal(api.status.state, 'ready');
    });

    it('a server that cannot start is reported, and commands still fail gracefully', async () => {
        stub.settings.set('tessera.server.path', path.join(dir, 'no-such-tessera'));
        await vscode.commands.executeCommand('tessera.restartServer');
        const err = stub.calls.filter((c) => c[0] === 'showErrorMessage').pop();
        assert.match(err[1], /could not start the language server/);
        await vscode.commands.executeCommand('tessera.showLowering', doc.uri.toString(), 'gemm');
        const err2 = stub.calls.filter((c) => c[0] === 'showErrorMessage').pop();
        assert.match(err2[1], /not running/);
        // Explore still works without a server (kernels read from the text).
        const body = doc.getText().split('\n').indexOf('    return x + 1.0');
        vscode.window.activeTextEditor = { document: doc, selection: { active: new vscode.Position(body, 4) } };
        await vscode.commands.executeCommand('tessera.exploreKernel');
        vscode.window.activeTextEditor = undefined;
        assert.match(stub.terminals.pop().sent[0], /--kernel graph_fn$/);
    });
});
