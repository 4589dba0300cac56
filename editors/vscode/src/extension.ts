// The Tessera VS Code extension: starts `tessera lsp`, shows its state in the status bar,
// handles the code-lens commands (`tessera.explore`, `tessera.run`), and shows lowered IR in
// read-only virtual documents. Everything that can be decided without VS Code lives in
// ./logic.ts (unit-tested).

import { execFile } from 'child_process';
import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import {
    CloseAction,
    ErrorAction,
    ErrorHandler,
    FeatureState,
    InitializeResult,
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

    /**
     * When the server exits during `initialize`, vscode-languageclient 9 forgets its own start
     * promise (its close handler clears it) and rejects it with nobody listening: start()
     * resolves instead (startServer checks the state), and the rejection would be reported
     * as unhandled. It is marked handled here; startServer reports the failure.
     */
    override start(): Promise<void> {
        const started = super.start();
        const pending = (this as unknown as { _onStart?: Promise<void> })._onStart;
        pending?.catch(() => undefined);
        return started;
    }

    /**
     * The same failure makes vscode-languageclient call `void this.stop()` while the client
     * is still starting, which rejects ("can't be stopped"): there is nothing to stop yet.
     */
    override stop(timeout?: number): Promise<void> {
        const whileStarting = this.state === State.Starting;
        return super.stop(timeout).catch((e: unknown) => {
            if (whileStarting) {
                return;
            }
            throw e;
        });
    }
}

/**
 * What `activate` returns (`vscode.extensions.getExtension('tessera-lang.tessera').exports`):
 * the language server's state as the status bar shows it. The real-client test reads it;
 * other extensions may too.
 */
export interface TesseraApi {
    readonly status: logic.ServerStatus;
    readonly onDidChangeStatus: vscode.Event<logic.ServerStatus>;
    /** The server's answer to `initialize`, while it runs. */
    readonly initializeResult: InitializeResult | undefined;
}

let client: LanguageClient | undefined;
let output: vscode.OutputChannel | undefined;
let traceOutput: vscode.OutputChannel | undefined;
let statusItem: ServerStatusItem | undefined;
/** Start, stop and restart run one after another, never interleaved. */
let lifecycle: Promise<void> = Promise.resolve();

export async function activate(context: vscode.ExtensionContext): Promise<TesseraApi> {
    output = vscode.window.createOutputChannel('Tessera Language Server');
    // The LSP traffic (`tessera.trace.server`) gets its own channel, so that the server's
    // log stays readable while tracing.
    traceOutput = vscode.window.createOutputChannel('Tessera Language Server Trace');
    statusItem = new ServerStatusItem();
    context.subscriptions.push(output, traceOutput, statusItem);

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
        vscode.commands.registerCommand('tessera.startServer', () => guard(() => serially(startServerCommand))),
        vscode.commands.registerCommand('tessera.stopServer', () => guard(() => serially(stopServer))),
        vscode.commands.registerCommand('tessera.restartServer', () => guard(() => serially(restartServer))),
        // Returns the message too, for scripts and tests (`executeCommand` hands it back).
        vscode.commands.registerCommand('tessera.showServerVersion', () => guardValue(() => showServerVersion())),
        vscode.commands.registerCommand('tessera.showOutput', () => output?.show(true)),
        vscode.workspace.onDidSaveTextDocument((doc) => {
            if (doc.languageId === LANGUAGE_ID) {
                void lowering.refreshSource(doc.uri);
            }
        }),
        vscode.workspace.onDidChangeConfiguration((e) => {
            // A server the user stopped stays stopped; "Tessera: Start Server" uses the new settings.
            if (
                (e.affectsConfiguration('tessera.server.path') || e.affectsConfiguration('tessera.server.args')) &&
                statusItem?.status.state !== 'stopped'
            ) {
                void guard(() => serially(restartServer));
            }
        }),
    );

    await serially(startServer);
    const item = statusItem;
    return {
        get status() {
            return item.status;
        },
        onDidChangeStatus: item.onDidChange,
        get initializeResult() {
            return client?.state === State.Running ? client.initializeResult : undefined;
        },
    };
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

/** Runs `op` after every start/stop/restart queued before it has finished. */
function serially(op: () => Promise<void>): Promise<void> {
    const next = lifecycle.then(op, op);
    // The queue itself never rejects: the caller sees `op`'s error through `next`.
    lifecycle = next.catch(() => undefined);
    return next;
}

/**
 * The status bar item: the server's state (starting, ready, failed, stopped) at a glance;
 * a click shows the server log.
 */
class ServerStatusItem implements vscode.Disposable {
    private readonly item = vscode.window.createStatusBarItem('tessera.server', vscode.StatusBarAlignment.Left, 0);
    private readonly changed = new vscode.EventEmitter<logic.ServerStatus>();
    readonly onDidChange = this.changed.event;
    private current: logic.ServerStatus = { state: 'stopped' };

    constructor() {
        this.item.name = 'Tessera Language Server';
        this.item.command = 'tessera.showOutput';
        this.set({ state: 'starting' });
        this.item.show();
    }

    get status(): logic.ServerStatus {
        return this.current;
    }

    set(status: logic.ServerStatus): void {
        // The client's own state changes and this extension's may say the same thing twice.
        if (JSON.stringify(status) === JSON.stringify(this.current)) {
            return;
        }
        this.current = status;
        const look = logic.statusPresentation(status);
        this.item.text = look.text;
        this.item.tooltip = look.tooltip;
        this.item.backgroundColor =
            look.background === undefined ? undefined : new vscode.ThemeColor(`statusBarItem.${look.background}Background`);
        this.changed.fire(status);
    }

    dispose(): void {
        this.item.dispose();
        this.changed.dispose();
    }
}

/**
 * When the server's connection breaks: a server that never got through `initialize` is not
 * restarted (startServer reports why it failed: restarting a server that refuses its
 * command line only repeats the failure); one that ran is restarted unless it keeps
 * crashing (logic.shouldRestart).
 */
class ServerErrorHandler implements ErrorHandler {
    private readonly crashes: number[] = [];

    error(_error: Error, _message: unknown, count: number | undefined): ReturnType<ErrorHandler['error']> {
        // A few unreadable or unwritable messages in a row mean the connection is gone.
        return { action: count !== undefined && count <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown };
    }

    closed(): ReturnType<ErrorHandler['closed']> {
        if (statusItem?.status.state !== 'ready') {
            return { action: CloseAction.DoNotRestart, handled: true };
        }
        this.crashes.push(Date.now());
        if (logic.shouldRestart(this.crashes, Date.now())) {
            return { action: CloseAction.Restart, handled: true };
        }
        setStatus({ ...(statusItem?.status ?? {}), state: 'error', detail: logic.CRASH_LOOP_MESSAGE });
        return { action: CloseAction.DoNotRestart, message: `Tessera: ${logic.CRASH_LOOP_MESSAGE}` };
    }
}

/**
 * The server's log channel as vscode-languageclient writes to it, keeping the last few
 * kilobytes of the server's stderr since this start: the client passes stderr on with
 * `append` and writes its own messages with `appendLine`, which are not kept.
 */
class TailedOutputChannel implements vscode.OutputChannel {
    private text = '';

    constructor(private readonly channel: vscode.OutputChannel) {}

    get name(): string {
        return this.channel.name;
    }

    tail(): string {
        return this.text;
    }

    append(value: string): void {
        this.text = (this.text + value).slice(-4096);
        this.channel.append(value);
    }

    appendLine(value: string): void {
        this.channel.appendLine(value);
    }

    replace(value: string): void {
        this.text = value.slice(-4096);
        this.channel.replace(value);
    }

    clear(): void {
        this.text = '';
        this.channel.clear();
    }

    show(columnOrPreserveFocus?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
        if (typeof columnOrPreserveFocus === 'boolean' || columnOrPreserveFocus === undefined) {
            this.channel.show(columnOrPreserveFocus);
        } else {
            this.channel.show(columnOrPreserveFocus, preserveFocus);
        }
    }

    hide(): void {
        this.channel.hide();
    }

    dispose(): void {
        // The channel outlives one start of the server: the extension disposes of it.
    }
}

function setStatus(status: logic.ServerStatus): void {
    statusItem?.set(status);
}

async function startServer(): Promise<void> {
    const command = serverPath();
    const args = serverArgs();
    const commandLine = [command, ...args].join(' ');
    // What the server writes to stderr goes to the log; its last line says why a start
    // failed better than vscode-languageclient's "connection got disposed".
    const serverLog = new TailedOutputChannel(output!);
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
        outputChannel: serverLog,
        traceOutputChannel: traceOutput,
        errorHandler: new ServerErrorHandler(),
        // No `initializationFailedHandler`: with one, vscode-languageclient 9 swallows the
        // failure (start() resolves) instead of rejecting.
    };
    // The client id `tessera` makes vscode-languageclient read `tessera.trace.server`.
    const c = new TesseraClient('tessera', 'Tessera Language Server', serverOptions, clientOptions);
    client = c;
    setStatus({ state: 'starting', command: commandLine });
    // Later state changes: vscode-languageclient restarts a crashed server by itself (and
    // gives up after a few crashes); a stop that this extension did not ask for is an error.
    // The first start's failure is startServer's to report (below), with the reason.
    let firstStartOver = false;
    c.onDidChangeState((e) => {
        if (client !== c || statusItem?.status.state === 'stopped') {
            return;
        }
        if (e.newState === State.Running) {
            setStatus({ state: 'ready', command: commandLine, serverInfo: c.initializeResult?.serverInfo });
        } else if (e.newState === State.Starting) {
            setStatus({ state: 'starting', command: commandLine });
        } else if (firstStartOver && statusItem?.status.state !== 'error') {
            setStatus({ state: 'error', command: commandLine, detail: 'The server stopped unexpectedly.' });
        }
    });
    try {
        await c.start();
        // vscode-languageclient 9 can resolve start() for a server that exited during
        // `initialize` (its close handler settles the start first): that is a failure too.
        if (c.state !== State.Running) {
            throw new Error('the server exited while starting');
        }
        firstStartOver = true;
        if (client === c) {
            setStatus({ state: 'ready', command: commandLine, serverInfo: c.initializeResult?.serverInfo });
        }
    } catch (e) {
        if (client !== c) {
            return;
        }
        client = undefined;
        // A server that refuses its command line exits at once; the client's write to it
        // can fail before its stderr has been read. Give the pipe a moment to drain.
        await new Promise((resolve) => setTimeout(resolve, 300));
        const message = logic.startFailure(errorMessage(e), serverLog.tail());
        setStatus({ state: 'error', command: commandLine, detail: `Could not start: ${message}` });
        // Not awaited: the start is over (a queued stop or restart must not wait for the user).
        void vscode.window
            .showErrorMessage(
                `Tessera: could not start the language server (\`${commandLine}\`): ${message}`,
                'Open Settings',
                'Show Log',
            )
            .then(async (choice) => {
                if (choice === 'Open Settings') {
                    await vscode.commands.executeCommand('workbench.action.openSettings', 'tessera.server');
                } else if (choice === 'Show Log') {
                    output?.show(true);
                }
            });
    }
}

async function startServerCommand(): Promise<void> {
    if (client && client.state !== State.Stopped) {
        vscode.window.setStatusBarMessage('Tessera: the language server is already running', 3000);
        return;
    }
    await startServer();
}

async function stopServer(): Promise<void> {
    const old = client;
    client = undefined;
    setStatus({ state: 'stopped', detail: 'Stopped by "Tessera: Stop Server".' });
    if (old && old.state !== State.Stopped) {
        await old.stop().catch(() => undefined);
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

/** Runs the configured server program with `--version`; resolves to what it printed. */
function runVersion(argv: readonly string[]): Promise<{ stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
        execFile(argv[0], argv.slice(1), { timeout: 10_000, windowsHide: true }, (error, stdout, stderr) => {
            if (error) {
                const code = (error as NodeJS.ErrnoException).code;
                const why =
                    code === 'ENOENT'
                        ? 'not found (set tessera.server.path)'
                        : stderr.trim().split(/\r?\n/)[0] || error.message;
                reject(new UserError(`\`${argv.join(' ')}\` failed: ${why}`));
            } else {
                resolve({ stdout, stderr });
            }
        });
    });
}

async function showServerVersion(): Promise<string> {
    const argv = logic.versionArgv(serverPath(), serverArgs());
    const { stdout } = await runVersion(argv);
    const running = client?.state === State.Running ? client.initializeResult?.serverInfo : undefined;
    const message = logic.versionMessage(argv.join(' '), logic.parseVersionOutput(stdout), stdout, running);
    output?.appendLine(`version: ${message}`);
    void vscode.window.showInformationMessage(`Tessera: ${message}`);
    return message;
}

function runningClient(): LanguageClient {
    if (!client || client.state !== State.Running) {
        throw new UserError('the Tessera language server is not running (see "Tessera: Start Server").');
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

/** `guard` for a command that hands back a value: `undefined` after an error (shown). */
async function guardValue<T>(f: () => Promise<T>): Promise<T | undefined> {
    let value: T | undefined;
    await guard(async () => {
        value = await f();
    });
    return value;
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
