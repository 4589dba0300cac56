// The Tessera VS Code extension: starts `tessera lsp`, handles the code-lens commands
// (`tessera.explore`, `tessera.run`), and shows lowered IR in read-only virtual documents.
// Everything that can be decided without VS Code lives in ./logic.ts (unit-tested).

import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import {
    FeatureState,
    LanguageClient,
    LanguageClientOptions,
    RequestType,
    ServerCapabilities,
    ServerOptions,
    State,
    StaticFeature,
    TransportKind,
} from 'vscode-languageclient/node';
import * as logic from './logic';

const LANGUAGE_ID = 'tessera';
const IR_LANGUAGE_ID = 'tessera-ir';

interface KernelsParams {
    uri: string;
}

const KernelsRequest = new RequestType<KernelsParams, logic.KernelInfo[] | null, void>('tessera/kernels');
const LoweringRequest = new RequestType<logic.LoweringParams, logic.LoweringResult, void>('tessera/lowering');

/** Commands this extension handles itself (the server's code lenses name them). */
const CLIENT_COMMANDS: ReadonlySet<string> = new Set(['tessera.explore', 'tessera.run']);

/**
 * Drops the client-side commands from the server's `executeCommandProvider` before
 * vscode-languageclient registers proxies for them: a server that also lists them (for clients
 * without an extension) must not make the registration fail with "command already exists".
 */
const clientCommandsFilter: StaticFeature = {
    fillClientCapabilities: () => undefined,
    initialize(capabilities: ServerCapabilities): void {
        const provider = capabilities.executeCommandProvider;
        if (provider && Array.isArray(provider.commands)) {
            provider.commands = provider.commands.filter((c) => !CLIENT_COMMANDS.has(c));
        }
    },
    getState: (): FeatureState => ({ kind: 'static' }),
    clear: () => undefined,
};

class TesseraClient extends LanguageClient {
    protected override registerBuiltinFeatures(): void {
        // Registered first, so it runs before the built-in ExecuteCommandFeature.
        this.registerFeature(clientCommandsFilter);
        super.registerBuiltinFeatures();
    }
}

let client: LanguageClient | undefined;
let output: vscode.OutputChannel | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    output = vscode.window.createOutputChannel('Tessera Language Server');
    context.subscriptions.push(output);

    const lowering = new LoweringProvider();
    const terminals = new TerminalPool();
    context.subscriptions.push(
        lowering,
        terminals,
        vscode.workspace.registerTextDocumentContentProvider(logic.IR_SCHEME, lowering),
        vscode.commands.registerCommand('tessera.showLowering', (uri?: unknown, kernel?: unknown) =>
            guard(() => showLowering(lowering, uri, kernel)),
        ),
        vscode.commands.registerCommand('tessera.exploreKernel', (uri?: unknown, kernel?: unknown) =>
            guard(() => exploreOrRun('explore', terminals, uri, kernel)),
        ),
        vscode.commands.registerCommand('tessera.runKernel', (uri?: unknown, kernel?: unknown) =>
            guard(() => exploreOrRun('run', terminals, uri, kernel)),
        ),
        // The server's code lenses carry `[uri, kernel]`.
        vscode.commands.registerCommand('tessera.explore', (uri?: unknown, kernel?: unknown) =>
            guard(() => exploreOrRun('explore', terminals, uri, kernel)),
        ),
        vscode.commands.registerCommand('tessera.run', (uri?: unknown, kernel?: unknown) =>
            guard(() => exploreOrRun('run', terminals, uri, kernel)),
        ),
        vscode.commands.registerCommand('tessera.restartServer', () => guard(() => restartServer())),
        vscode.workspace.onDidSaveTextDocument((doc) => {
            if (doc.languageId === LANGUAGE_ID) {
                void lowering.refreshSource(doc.uri);
            }
        }),
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (
                e.affectsConfiguration('tessera.server.path') ||
                e.affectsConfiguration('tessera.server.args')
            ) {
                void guard(() => restartServer());
            }
        }),
    );

    await startServer();
}

export async function deactivate(): Promise<void> {
    const c = client;
    client = undefined;
    if (c) {
        await c.stop().catch(() => undefined);
    }
}

// ---------------------------------------------------------------------------------------------
// The language client

function config(): vscode.WorkspaceConfiguration {
    return vscode.workspace.getConfiguration('tessera');
}

function pathVars(): { home: string; workspaceFolder?: string } {
    return { home: os.homedir(), workspaceFolder: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath };
}

function serverPath(): string {
    return logic.expandPath(config().get<string>('server.path') || 'tessera', pathVars());
}

function serverArgs(): string[] {
    const args = config().get<unknown>('server.args');
    return Array.isArray(args) ? args.filter((a): a is string => typeof a === 'string') : ['lsp'];
}

async function startServer(): Promise<void> {
    const command = serverPath();
    const args = serverArgs();
    const serverOptions: ServerOptions = {
        run: { command, args, transport: TransportKind.stdio },
        debug: { command, args, transport: TransportKind.stdio },
    };
    const clientOptions: LanguageClientOptions = {
        documentSelector: [
            { scheme: 'file', language: LANGUAGE_ID },
            { scheme: 'untitled', language: LANGUAGE_ID },
        ],
        synchronize: {
            configurationSection: 'tessera',
            fileEvents: vscode.workspace.createFileSystemWatcher('**/tessera.toml'),
        },
        initializationOptions: { target: config().get<string>('target', 'sm_90') },
        outputChannel: output,
        traceOutputChannel: output,
    };
    // The client id `tessera` makes vscode-languageclient read `tessera.trace.server`.
    const c = new TesseraClient('tessera', 'Tessera Language Server', serverOptions, clientOptions);
    client = c;
    try {
        await c.start();
    } catch (e) {
        if (client === c) {
            client = undefined;
        }
        const choice = await vscode.window.showErrorMessage(
            `Tessera: could not start the language server (\`${[command, ...args].join(' ')}\`): ${errorMessage(e)}`,
            'Open Settings',
            'Show Log',
        );
        if (choice === 'Open Settings') {
            await vscode.commands.executeCommand('workbench.action.openSettings', 'tessera.server');
        } else if (choice === 'Show Log') {
            output?.show(true);
        }
    }
}

async function restartServer(): Promise<void> {
    const old = client;
    client = undefined;
    if (old && old.state !== State.Stopped) {
        await old.stop().catch(() => undefined);
    }
    await startServer();
    if (client) {
        vscode.window.setStatusBarMessage('Tessera: language server restarted', 3000);
    }
}

function runningClient(): LanguageClient {
    if (!client || client.state !== State.Running) {
        throw new UserError('the Tessera language server is not running (see "Tessera: Restart Server").');
    }
    return client;
}

// ---------------------------------------------------------------------------------------------
// Kernels: which one the user means

async function sourceDocument(uriArg: unknown): Promise<vscode.TextDocument> {
    if (typeof uriArg === 'string' || uriArg instanceof vscode.Uri) {
        const uri = typeof uriArg === 'string' ? vscode.Uri.parse(uriArg) : uriArg;
        const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
        return open ?? (await vscode.workspace.openTextDocument(uri));
    }
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== LANGUAGE_ID) {
        throw new UserError('open a .tsr file first.');
    }
    return editor.document;
}

/** The document's kernels from the server, or read from the text when no server runs. */
async function kernelsOf(doc: vscode.TextDocument): Promise<logic.KernelInfo[]> {
    if (client && client.state === State.Running) {
        try {
            const res = await client.sendRequest(KernelsRequest, {
                uri: client.code2ProtocolConverter.asUri(doc.uri),
            });
            return res ?? [];
        } catch (e) {
            output?.appendLine(`tessera/kernels failed: ${errorMessage(e)}; falling back to a text scan`);
        }
    }
    return logic.scanKernels(doc.getText());
}

async function resolveKernel(doc: vscode.TextDocument, kernelArg: unknown): Promise<string | undefined> {
    if (typeof kernelArg === 'string' && kernelArg !== '') {
        return kernelArg;
    }
    const kernels = await kernelsOf(doc);
    if (kernels.length === 0) {
        throw new UserError(`no kernels or graph functions in ${path.basename(doc.uri.fsPath || doc.uri.path)}.`);
    }
    const editor = vscode.window.activeTextEditor;
    if (editor && editor.document.uri.toString() === doc.uri.toString()) {
        const under = logic.pickKernelAt(kernels, editor.selection.active);
        if (under) {
            return under.name;
        }
    }
    if (kernels.length === 1) {
        return kernels[0].name;
    }
    const picked = await vscode.window.showQuickPick(
        logic.sortKernels(kernels).map((k) => ({
            label: k.name,
            description: k.kind,
            detail: `line ${k.range.start.line + 1}`,
        })),
        { title: 'Tessera: pick a kernel', placeHolder: 'Kernel or graph function' },
    );
    return picked?.label;
}

async function pickStage(): Promise<logic.Stage | undefined> {
    const picked = await vscode.window.showQuickPick(
        logic.STAGES.map((s) => ({ label: s.label, description: s.stage, detail: s.description, stage: s.stage })),
        { title: 'Tessera: lowering stage', placeHolder: 'Graph → Schedule → Tile → Target' },
    );
    return picked?.stage;
}

// ---------------------------------------------------------------------------------------------
// Show Lowering: `tessera/lowering` into a `tessera-ir:` virtual document

async function showLowering(provider: LoweringProvider, uriArg: unknown, kernelArg: unknown): Promise<void> {
    runningClient();
    const doc = await sourceDocument(uriArg);
    const kernel = await resolveKernel(doc, kernelArg);
    if (!kernel) {
        return;
    }
    const stage = await pickStage();
    if (!stage) {
        return;
    }
    const target = config().get<string>('target', 'sm_90');
    const key: logic.IrDocumentKey = { source: doc.uri.toString(), kernel, stage, target };
    const irUri = vscode.Uri.from(logic.encodeIrUri(key));
    await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: `Tessera: lowering ${kernel} (${stage})` },
        () => provider.load(irUri, key),
    );
    let irDoc = await vscode.workspace.openTextDocument(irUri);
    if (irDoc.languageId !== IR_LANGUAGE_ID) {
        irDoc = await vscode.languages.setTextDocumentLanguage(irDoc, IR_LANGUAGE_ID);
    }
    await vscode.window.showTextDocument(irDoc, {
        viewColumn: vscode.ViewColumn.Beside,
        preserveFocus: true,
        preview: false,
    });
}

/**
 * Read-only IR documents. Results are cached per IR URI (the content provider must answer
 * synchronously-ish and the source map is needed for highlighting); a save of the source
 * re-requests every open preview of it.
 */
class LoweringProvider implements vscode.TextDocumentContentProvider, vscode.Disposable {
    private readonly changed = new vscode.EventEmitter<vscode.Uri>();
    readonly onDidChange = this.changed.event;
    private readonly results = new Map<string, logic.LoweringResult>();
    private readonly sourceDecoration = vscode.window.createTextEditorDecorationType({
        backgroundColor: new vscode.ThemeColor('editor.rangeHighlightBackground'),
        borderColor: new vscode.ThemeColor('editor.rangeHighlightBorder'),
        borderStyle: 'solid',
        borderWidth: '1px',
    });
    private readonly irDecoration = vscode.window.createTextEditorDecorationType({
        backgroundColor: new vscode.ThemeColor('editor.rangeHighlightBackground'),
        isWholeLine: true,
    });
    private readonly disposables: vscode.Disposable[] = [];

    constructor() {
        this.disposables.push(
            this.changed,
            this.sourceDecoration,
            this.irDecoration,
            vscode.workspace.onDidCloseTextDocument((d) => {
                if (d.uri.scheme === logic.IR_SCHEME) {
                    this.results.delete(d.uri.toString());
                }
            }),
            vscode.window.onDidChangeTextEditorSelection((e) => this.onSelection(e.textEditor)),
        );
    }

    dispose(): void {
        for (const d of this.disposables) {
            d.dispose();
        }
    }

    async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
        const cached = this.results.get(uri.toString());
        if (cached) {
            return cached.text;
        }
        const key = logic.decodeIrUri(uri);
        if (!key) {
            return `// not a Tessera IR document: ${uri.toString()}\n`;
        }
        try {
            return (await this.load(uri, key)).text;
        } catch (e) {
            return `// Tessera: lowering ${key.kernel} (${key.stage}) failed: ${errorMessage(e)}\n`;
        }
    }

    /** Requests the lowering and caches it; throws the server's error message. */
    async load(uri: vscode.Uri, key: logic.IrDocumentKey): Promise<logic.LoweringResult> {
        const c = runningClient();
        const params: logic.LoweringParams = {
            uri: c.code2ProtocolConverter.asUri(vscode.Uri.parse(key.source)),
            kernel: key.kernel,
            stage: key.stage,
        };
        if (logic.isTarget(key.target)) {
            params.target = key.target;
        }
        let result: logic.LoweringResult;
        try {
            result = await c.sendRequest(LoweringRequest, params);
        } catch (e) {
            throw new UserError(`lowering ${key.kernel} (${key.stage}) failed: ${errorMessage(e)}`);
        }
        this.results.set(uri.toString(), { ...result, sourceMap: result.sourceMap ?? [] });
        // An already open preview shows the new text (VS Code asks the provider again and gets
        // the cached result); for one not open yet the event is ignored.
        this.changed.fire(uri);
        return result;
    }

    /** Re-requests every open preview of `source` (on save). Errors go to the status bar. */
    async refreshSource(source: vscode.Uri): Promise<void> {
        const src = source.toString();
        const open = vscode.workspace.textDocuments.filter((d) => d.uri.scheme === logic.IR_SCHEME);
        for (const d of open) {
            const key = logic.decodeIrUri(d.uri);
            if (!key || key.source !== src) {
                continue;
            }
            try {
                await this.load(d.uri, key);
            } catch (e) {
                vscode.window.setStatusBarMessage(
                    `$(warning) Tessera: ${errorMessage(e)} (showing the previous lowering)`,
                    8000,
                );
            }
        }
    }

    /** Cross-highlighting: IR line ⇄ the source ranges it came from. */
    private onSelection(editor: vscode.TextEditor): void {
        const doc = editor.document;
        if (doc.uri.scheme === logic.IR_SCHEME) {
            const result = this.results.get(doc.uri.toString());
            const key = logic.decodeIrUri(doc.uri);
            if (!result || !key) {
                return;
            }
            const ranges = logic
                .sourceRangesForIrLine(result.sourceMap, editor.selection.active.line)
                .map(toVsRange);
            for (const ed of vscode.window.visibleTextEditors) {
                if (ed.document.uri.toString() === key.source) {
                    ed.setDecorations(this.sourceDecoration, ranges);
                    if (ranges.length > 0) {
                        ed.revealRange(ranges[0], vscode.TextEditorRevealType.InCenterIfOutsideViewport);
                    }
                }
            }
        } else if (doc.languageId === LANGUAGE_ID) {
            const src = doc.uri.toString();
            for (const ed of vscode.window.visibleTextEditors) {
                if (ed.document.uri.scheme !== logic.IR_SCHEME) {
                    continue;
                }
                const key = logic.decodeIrUri(ed.document.uri);
                const result = this.results.get(ed.document.uri.toString());
                if (!key || !result || key.source !== src) {
                    continue;
                }
                const lines = logic.irLinesForSourcePosition(result.sourceMap, editor.selection.active);
                const ranges = lines
                    .filter((l) => l < ed.document.lineCount)
                    .map((l) => ed.document.lineAt(l).range);
                ed.setDecorations(this.irDecoration, ranges);
                if (ranges.length > 0) {
                    ed.revealRange(ranges[0], vscode.TextEditorRevealType.InCenterIfOutsideViewport);
                }
            }
        }
    }
}

function toVsRange(r: logic.Range): vscode.Range {
    return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}

// ---------------------------------------------------------------------------------------------
// Explore / Run in the integrated terminal

/** One terminal per (action, file, kernel); re-running replaces it. */
class TerminalPool implements vscode.Disposable {
    private readonly terminals = new Map<string, vscode.Terminal>();
    private readonly sub = vscode.window.onDidCloseTerminal((t) => {
        for (const [k, v] of this.terminals) {
            if (v === t) {
                this.terminals.delete(k);
            }
        }
    });

    run(id: string, name: string, argv: string[], cwd: string | undefined): void {
        const old = this.terminals.get(id);
        if (old) {
            old.dispose();
        }
        const kind = logic.shellKindFor(vscode.env.shell, process.platform);
        const terminal = vscode.window.createTerminal({ name, cwd });
        this.terminals.set(id, terminal);
        terminal.show();
        terminal.sendText(logic.buildCommandLine(argv, kind), true);
    }

    dispose(): void {
        this.sub.dispose();
    }
}

async function exploreOrRun(
    action: 'explore' | 'run',
    terminals: TerminalPool,
    uriArg: unknown,
    kernelArg: unknown,
): Promise<void> {
    const doc = await sourceDocument(uriArg);
    if (doc.uri.scheme !== 'file') {
        throw new UserError(`save the file first: the ${action === 'run' ? 'runner' : 'explorer'} reads it from disk.`);
    }
    const kernel = await resolveKernel(doc, kernelArg);
    if (!kernel) {
        return;
    }
    if (doc.isDirty) {
        await doc.save();
    }
    const file = doc.uri.fsPath;
    const cwd = vscode.workspace.getWorkspaceFolder(doc.uri)?.uri.fsPath ?? path.dirname(file);
    const vars = pathVars();
    if (action === 'explore') {
        const explorer = logic.expandPath(config().get<string>('explore.path') || 'tessera-explore', vars);
        terminals.run(`explore:${file}:${kernel}`, `Explore ${kernel}`, logic.exploreArgv(explorer, file, kernel), cwd);
    } else {
        const cli = logic.resolveCliPath(
            logic.expandPath(config().get<string>('cli.path') || '', vars),
            serverPath(),
            process.platform,
        );
        const extra = config().get<string[]>('run.args') ?? [];
        terminals.run(`run:${file}:${kernel}`, `Run ${kernel}`, logic.runArgv(cli, file, kernel, extra), cwd);
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/** An error whose message is meant for the user as is. */
class UserError extends Error {}

function errorMessage(e: unknown): string {
    if (e instanceof Error) {
        return e.message;
    }
    if (e && typeof e === 'object' && 'message' in e && typeof (e as { message: unknown }).message === 'string') {
        return (e as { message: string }).message;
    }
    return String(e);
}

async function guard(f: () => Promise<void>): Promise<void> {
    try {
        await f();
    } catch (e) {
        if (!(e instanceof UserError)) {
            output?.appendLine(`error: ${e instanceof Error && e.stack ? e.stack : errorMessage(e)}`);
        }
        void vscode.window.showErrorMessage(`Tessera: ${errorMessage(e)}`);
    }
}
