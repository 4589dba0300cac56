// Pure logic of the Tessera extension: no `vscode` import, so it runs (and is unit-tested)
// under plain Node. Positions and ranges are LSP-shaped (0-based, UTF-16 columns); VS Code's
// `Position`/`Range` have the same fields, so they can be passed in directly.

export interface Position {
    line: number;
    character: number;
}

export interface Range {
    start: Position;
    end: Position;
}

/** One entry of the `tessera/kernels` result. */
export interface KernelInfo {
    name: string;
    /** "kernel", "kernel.autotune", "kernel.schedule", "jit", ... */
    kind: string;
    range: Range;
}

export type Stage = 'graph' | 'sched' | 'tile' | 'target' | 'all';
export type Target = 'sm_80' | 'sm_90' | 'cpu';

export const STAGES: ReadonlyArray<{ stage: Stage; label: string; description: string }> = [
    { stage: 'graph', label: 'Graph', description: 'Graph IR: ops, fusion groups, effects' },
    { stage: 'sched', label: 'Schedule', description: 'Schedule IR: blocks, warps, stages, pipelining' },
    { stage: 'tile', label: 'Tile', description: 'Tile IR: tiles, shared buffers, async copies, barriers' },
    { stage: 'target', label: 'Target', description: 'Target IR for the selected target (sm_80, sm_90, cpu)' },
    { stage: 'all', label: 'All stages', description: 'Every stage, one after another, with headers' },
];

export const TARGETS: readonly Target[] = ['sm_90', 'sm_80', 'cpu'];

export function isStage(value: unknown): value is Stage {
    return typeof value === 'string' && STAGES.some((s) => s.stage === value);
}

export function isTarget(value: unknown): value is Target {
    return typeof value === 'string' && (TARGETS as readonly string[]).includes(value);
}

/** Params of the `tessera/lowering` request. */
export interface LoweringParams {
    uri: string;
    kernel: string;
    stage: Stage;
    target?: Target;
}

export interface SourceMapEntry {
    /** 0-based line in `text`. */
    irLine: number;
    /** Range in the source document. */
    range: Range;
}

/** Result of the `tessera/lowering` request. */
export interface LoweringResult {
    kernel: string;
    stage: string;
    target: string;
    text: string;
    sourceMap: SourceMapEntry[];
}

// ---------------------------------------------------------------------------------------------
// Positions and ranges

export function comparePositions(a: Position, b: Position): number {
    return a.line !== b.line ? a.line - b.line : a.character - b.character;
}

/** True when `pos` lies in `range`, both ends included (a cursor just after a name counts). */
export function rangeContains(range: Range, pos: Position): boolean {
    return comparePositions(range.start, pos) <= 0 && comparePositions(pos, range.end) <= 0;
}

function rangeSize(range: Range): number {
    // Lines dominate; columns break ties between ranges on the same lines.
    return (range.end.line - range.start.line) * 1_000_000 + (range.end.character - range.start.character);
}

/**
 * The kernel "under the cursor".
 *
 * 1. The innermost kernel whose range contains `pos` (ranges normally span the whole
 *    definition, decorators included).
 * 2. When the server reports header-only ranges (every range on a single line), the last
 *    kernel that starts at or before the cursor line: the cursor is in its body.
 * 3. Otherwise `undefined`: the caller asks with a quick pick.
 */
export function pickKernelAt(kernels: readonly KernelInfo[], pos: Position): KernelInfo | undefined {
    let best: KernelInfo | undefined;
    for (const k of kernels) {
        if (rangeContains(k.range, pos) && (!best || rangeSize(k.range) < rangeSize(best.range))) {
            best = k;
        }
    }
    if (best) {
        return best;
    }
    const headerOnly = kernels.length > 0 && kernels.every((k) => k.range.start.line === k.range.end.line);
    if (!headerOnly) {
        return undefined;
    }
    let last: KernelInfo | undefined;
    for (const k of sortKernels(kernels)) {
        if (k.range.start.line <= pos.line) {
            last = k;
        }
    }
    return last;
}

/** Kernels in document order (by range start), a stable copy. */
export function sortKernels(kernels: readonly KernelInfo[]): KernelInfo[] {
    return [...kernels].sort((a, b) => comparePositions(a.range.start, b.range.start));
}

/**
 * A fallback kernel list read from the text with regular expressions, for Explore/Run when
 * the language server is not running. Finds `def`s decorated with `@kernel...`, `@jit` or
 * `@autodiff` (optionally written `@ts.kernel` or `@<alias>.jit`); the range runs from the
 * first decorator to the last non-blank line of the body.
 */
export function scanKernels(text: string): KernelInfo[] {
    const lines = text.split(/\r?\n/);
    const result: KernelInfo[] = [];
    const decoratorRe = /^@\s*(?:[A-Za-z_]\w*\s*\.\s*)?(kernel(?:\s*\.\s*[A-Za-z_]\w*)?|jit|autodiff)\b/;
    let firstDecoratorLine = -1;
    let kind: string | undefined;
    let depth = 0; // bracket depth inside a multi-line decorator
    for (let i = 0; i < lines.length; i++) {
        const line = lines[i];
        if (depth > 0) {
            depth += bracketDelta(line);
            continue;
        }
        if (line.startsWith('@')) {
            const m = decoratorRe.exec(line);
            if (firstDecoratorLine < 0) {
                firstDecoratorLine = i;
            }
            if (m) {
                const k = m[1].replace(/\s+/g, '');
                // `@jit @autodiff` → "jit"; a kernel decorator wins over graph decorators.
                if (!kind || (k.startsWith('kernel') && !kind.startsWith('kernel'))) {
                    kind = k;
                }
            }
            depth = Math.max(0, bracketDelta(line));
            continue;
        }
        const def = /^def\s+([A-Za-z_]\w*)/.exec(line);
        if (def && kind !== undefined) {
            let end = i;
            let depthDef = 0;
            for (let j = i; j < lines.length; j++) {
                const l = lines[j];
                if (j > i && depthDef <= 0 && /^\S/.test(l) && !l.startsWith('#')) {
                    break;
                }
                depthDef += bracketDelta(l);
                if (l.trim() !== '' && !/^\s*#/.test(l)) {
                    end = j;
                }
            }
            result.push({
                name: def[1],
                kind,
                range: {
                    start: { line: firstDecoratorLine >= 0 ? firstDecoratorLine : i, character: 0 },
                    end: { line: end, character: lines[end].length },
                },
            });
        }
        if (line.trim() !== '' && !line.startsWith('#')) {
            firstDecoratorLine = -1;
            kind = undefined;
        }
    }
    return result;
}

function bracketDelta(line: string): number {
    let d = 0;
    let quote: string | undefined;
    for (let i = 0; i < line.length; i++) {
        const c = line[i];
        if (quote) {
            if (c === '\\') {
                i++;
            } else if (c === quote) {
                quote = undefined;
            }
            continue;
        }
        if (c === '#') {
            break;
        }
        if (c === '"' || c === "'") {
            quote = c;
        } else if (c === '(' || c === '[' || c === '{') {
            d++;
        } else if (c === ')' || c === ']' || c === '}') {
            d--;
        }
    }
    return d;
}

/** `[uri, kernel]` arguments of the `tessera.explore` / `tessera.run` code lenses. */
export function parseKernelArgs(args: readonly unknown[]): { uri: string; kernel: string } | undefined {
    const [uri, kernel] = args;
    if (typeof uri === 'string' && uri !== '' && typeof kernel === 'string' && kernel !== '') {
        return { uri, kernel };
    }
    return undefined;
}

// ---------------------------------------------------------------------------------------------
// Virtual IR documents (`tessera-ir:` URIs)

export const IR_SCHEME = 'tessera-ir';

/** What an IR preview shows; encoded in its URI so the document can be re-requested. */
export interface IrDocumentKey {
    /** The source document's URI, as VS Code prints it (`Uri.toString()`). */
    source: string;
    kernel: string;
    stage: Stage;
    target: string;
}

/**
 * The parts of a `tessera-ir:` URI (pass them to `Uri.from`). The path is what the editor tab
 * shows (`/gemm.tile.sm_90.tir` under the source file's name); the query carries the key.
 */
export function encodeIrUri(key: IrDocumentKey): { scheme: string; path: string; query: string } {
    const base = sourceBaseName(key.source);
    const path = `/${base}/${key.kernel}.${key.stage}.${key.target}.tir`;
    const query = new URLSearchParams({
        source: key.source,
        kernel: key.kernel,
        stage: key.stage,
        target: key.target,
    }).toString();
    return { scheme: IR_SCHEME, path, query };
}

/** Inverse of `encodeIrUri` (reads only the query); `undefined` for a URI that is not ours. */
export function decodeIrUri(uri: { scheme?: string; query: string }): IrDocumentKey | undefined {
    if (uri.scheme !== undefined && uri.scheme !== IR_SCHEME) {
        return undefined;
    }
    const q = new URLSearchParams(uri.query);
    const source = q.get('source');
    const kernel = q.get('kernel');
    const stage = q.get('stage');
    const target = q.get('target');
    if (!source || !kernel || !isStage(stage) || !target) {
        return undefined;
    }
    return { source, kernel, stage, target };
}

/** Last path segment of a URI string, percent-decoded ("my kernels.tsr"). */
export function sourceBaseName(uri: string): string {
    const noQuery = uri.replace(/[?#].*$/, '');
    const seg = noQuery.substring(noQuery.lastIndexOf('/') + 1) || noQuery;
    let name: string;
    try {
        name = decodeURIComponent(seg);
    } catch {
        name = seg;
    }
    // Keep the path well-formed: no separators in one segment.
    return name.replace(/[/\\]/g, '_') || 'untitled';
}

// ---------------------------------------------------------------------------------------------
// Source maps

/** IR lines (sorted, unique) whose source range contains `pos`. */
export function irLinesForSourcePosition(sourceMap: readonly SourceMapEntry[], pos: Position): number[] {
    const lines = new Set<number>();
    for (const e of sourceMap) {
        if (rangeContains(e.range, pos)) {
            lines.add(e.irLine);
        }
    }
    return [...lines].sort((a, b) => a - b);
}

/** Source ranges produced by IR line `irLine`, in document order, duplicates removed. */
export function sourceRangesForIrLine(sourceMap: readonly SourceMapEntry[], irLine: number): Range[] {
    const seen = new Set<string>();
    const out: Range[] = [];
    for (const e of sourceMap) {
        if (e.irLine !== irLine) {
            continue;
        }
        const k = `${e.range.start.line}:${e.range.start.character}-${e.range.end.line}:${e.range.end.character}`;
        if (!seen.has(k)) {
            seen.add(k);
            out.push(e.range);
        }
    }
    return out.sort((a, b) => comparePositions(a.start, b.start));
}

// ---------------------------------------------------------------------------------------------
// Command lines for the integrated terminal

export type ShellKind = 'posix' | 'powershell' | 'cmd';

/** The quoting rules of the shell at `shellPath` (VS Code's `env.shell`). */
export function shellKindFor(shellPath: string | undefined, platform: string): ShellKind {
    if (!shellPath) {
        return platform === 'win32' ? 'powershell' : 'posix';
    }
    const base = shellPath
        .replace(/^.*[/\\]/, '')
        .toLowerCase()
        .replace(/\.exe$/, '');
    if (base === 'pwsh' || base === 'powershell' || base === 'pwsh-preview') {
        return 'powershell';
    }
    if (base === 'cmd') {
        return 'cmd';
    }
    return 'posix'; // sh, bash, zsh, fish, dash, ksh, git-bash, wsl's bash, ...
}

/** Quote one argument so that the shell passes it through unchanged. */
export function quoteArg(arg: string, kind: ShellKind): string {
    switch (kind) {
        case 'posix':
            // A leading `=` or `~` is expanded by zsh/bash; everything else here is inert.
            if (/^[A-Za-z0-9_@%+:,./-][A-Za-z0-9_@%+=:,./-]*$/.test(arg)) {
                return arg;
            }
            return `'${arg.replace(/'/g, `'\\''`)}'`;
        case 'powershell':
            // No `,` (array operator), `@` (splatting), `$`, backtick or quotes unquoted.
            if (/^[A-Za-z0-9_+=:./\\-]+$/.test(arg) && !/^-?-%/.test(arg)) {
                return arg;
            }
            // In single quotes only `'` is special (doubled); curly quotes count as quotes too.
            return `'${arg.replace(/['\u2018\u2019\u201a\u201b]/g, (q) => q + q)}'`;
        case 'cmd':
            if (/^[A-Za-z0-9_+=:,./\\-]+$/.test(arg)) {
                return arg;
            }
            // `"` cannot appear in Windows file names; doubling is the usual escape.
            return `"${arg.replace(/"/g, '""')}"`;
    }
}

/** One command line for `Terminal.sendText`. PowerShell needs `&` to call a quoted program. */
export function buildCommandLine(argv: readonly string[], kind: ShellKind): string {
    if (argv.length === 0) {
        throw new Error('empty command');
    }
    const quoted = argv.map((a) => quoteArg(a, kind));
    if (kind === 'powershell') {
        return `& ${quoted.join(' ')}`;
    }
    return quoted.join(' ');
}

function programBase(program: string): string {
    return program
        .replace(/^.*[/\\]/, '')
        .toLowerCase()
        .replace(/\.exe$/, '');
}

/**
 * `tessera-explore FILE --kernel NAME`; when the configured explorer is the `tessera` CLI
 * itself, `tessera explore FILE --kernel NAME`.
 */
export function exploreArgv(explorePath: string, file: string, kernel: string): string[] {
    const program = explorePath.trim() || 'tessera-explore';
    const sub = programBase(program) === 'tessera' ? ['explore'] : [];
    return [program, ...sub, file, '--kernel', kernel];
}

/** `tessera run FILE --kernel NAME [extra...]`. */
export function runArgv(cliPath: string, file: string, kernel: string, extra: readonly string[] = []): string[] {
    return [cliPath, 'run', file, '--kernel', kernel, ...extra];
}

/**
 * The `tessera` CLI for `tessera run`: the `tessera.cli.path` setting when set; else the server
 * program when it is the CLI; else `tessera` next to a `tessera-lsp` binary given by path; else
 * `tessera` (looked up on PATH).
 */
export function resolveCliPath(cliSetting: string, serverPath: string, platform: string): string {
    if (cliSetting.trim() !== '') {
        return cliSetting.trim();
    }
    const base = programBase(serverPath);
    if (base === 'tessera') {
        return serverPath;
    }
    const exe = platform === 'win32' ? 'tessera.exe' : 'tessera';
    const slash = Math.max(serverPath.lastIndexOf('/'), platform === 'win32' ? serverPath.lastIndexOf('\\') : -1);
    if (base === 'tessera-lsp' && slash >= 0) {
        return serverPath.substring(0, slash + 1) + exe;
    }
    return 'tessera';
}

/** Expands a leading `~` and `${workspaceFolder}` / `${userHome}` in a configured path. */
export function expandPath(p: string, vars: { home?: string; workspaceFolder?: string }): string {
    let out = p.trim();
    if (vars.home && (out === '~' || out.startsWith('~/') || out.startsWith('~\\'))) {
        out = vars.home + out.substring(1);
    }
    out = out.replace(/\$\{(workspaceFolder|userHome)\}/g, (whole, name: string) => {
        const v = name === 'userHome' ? vars.home : vars.workspaceFolder;
        return v ?? whole;
    });
    return out;
}

// ---------------------------------------------------------------------------------------------
// The language server's status (the status bar item) and version

/** What the status bar says about the language server. */
export type ServerState = 'starting' | 'ready' | 'error' | 'stopped';

export interface ServerStatus {
    state: ServerState;
    /** The command line that starts the server (`tessera lsp`). */
    command?: string;
    /** Why it is in `error` or `stopped`, when known. */
    detail?: string;
    /** The running server's name and version, from its `initialize` answer. */
    serverInfo?: { name: string; version?: string };
}

export interface StatusPresentation {
    text: string;
    tooltip: string;
    /** The status bar item's background: VS Code's `statusBarItem.errorBackground` and the like. */
    background?: 'error' | 'warning';
}

const STATUS_LOOK: Record<ServerState, { icon: string; words: string; background?: 'error' | 'warning' }> = {
    starting: { icon: '$(loading~spin)', words: 'starting' },
    ready: { icon: '$(check)', words: 'ready' },
    error: { icon: '$(error)', words: 'failed', background: 'error' },
    stopped: { icon: '$(debug-stop)', words: 'stopped', background: 'warning' },
};

/** The status bar item for a server status; the tooltip ends with what a click does. */
export function statusPresentation(status: ServerStatus): StatusPresentation {
    const look = STATUS_LOOK[status.state];
    const lines = [`Tessera language server: ${look.words}`];
    if (status.serverInfo) {
        lines[0] += ` (${[status.serverInfo.name, status.serverInfo.version].filter(Boolean).join(' ')})`;
    }
    if (status.detail) {
        lines.push(status.detail);
    }
    if (status.command) {
        lines.push(`Command: ${status.command}`);
    }
    if (status.state === 'stopped') {
        lines.push('Run "Tessera: Start Server" to start it again.');
    } else if (status.state === 'error') {
        lines.push('Run "Tessera: Restart Server" after fixing the cause (see the log).');
    }
    lines.push('Click to show the server log.');
    return { text: `${look.icon} Tessera`, tooltip: lines.join('\n'), background: look.background };
}

/** The argv that asks the configured server for its version: its arguments plus `--version`. */
export function versionArgv(command: string, args: readonly string[]): string[] {
    return [command, ...args, '--version'];
}

export interface ProgramVersion {
    /** The program's name as it prints it (`tessera-lsp`). */
    name: string;
    /** `0.1.0`, or whatever followed the name (`0.2.0-dev (abc1234 2026-11-25)`). */
    version: string;
}

/**
 * Reads `--version` output: the first non-blank line, `NAME VERSION...` (`tessera-lsp 0.1.0`;
 * a leading `v` on the version is dropped). `undefined` when the line does not look like a
 * version, such as a usage message from a program that does not know `--version`.
 */
export function parseVersionOutput(stdout: string): ProgramVersion | undefined {
    const line = stdout.split(/\r?\n/).find((l) => l.trim() !== '');
    if (line === undefined) {
        return undefined;
    }
    const m = /^\s*(\S+)\s+v?(\d+(?:\.\d+)*(?:[-+.][0-9A-Za-z.+-]*)?(?:\s.*)?)$/.exec(line.trimEnd());
    if (!m) {
        return undefined;
    }
    return { name: m[1], version: m[2].trim() };
}

/**
 * What "Tessera: Show Server Version" says: the version the configured binary prints, and
 * the running server's when it differs (the binary was replaced since the server started).
 */
export function versionMessage(
    commandLine: string,
    binary: ProgramVersion | undefined,
    rawOutput: string,
    running: { name: string; version?: string } | undefined,
): string {
    if (!binary) {
        const shown = rawOutput.trim().split(/\r?\n/)[0] ?? '';
        return shown === ''
            ? `\`${commandLine}\` printed no version.`
            : `\`${commandLine}\` printed no version: "${shown}".`;
    }
    let message = `${binary.name} ${binary.version} (\`${commandLine}\`)`;
    if (running?.version && running.version !== binary.version) {
        message += `; the running server is ${running.name} ${running.version}: restart it to use the new binary.`;
    }
    return message;
}

/**
 * Why the server did not start, for the user: the last line it wrote to stderr (often its
 * own reason, such as `tessera-lsp: unexpected argument ...`) followed by the client's error,
 * or the client's error alone when the server wrote nothing.
 */
export function startFailure(clientError: string, serverOutput: string): string {
    const lines = serverOutput
        .split(/\r?\n/)
        .map((l) => l.trim())
        .filter((l) => l !== '' && !/^Usage:/i.test(l));
    const last = lines[lines.length - 1];
    if (last === undefined || clientError.includes(last)) {
        return clientError;
    }
    return `${last} (${clientError})`;
}

/** How many crashes, within `CRASH_WINDOW_MS`, the server is restarted after. */
export const MAX_RESTARTS = 4;
export const CRASH_WINDOW_MS = 3 * 60_000;
export const CRASH_LOOP_MESSAGE = `the language server crashed ${MAX_RESTARTS + 1} times in ${CRASH_WINDOW_MS / 60_000} minutes and was not restarted: see the log, then run "Tessera: Restart Server".`;

/**
 * Whether to restart a server that has just crashed. `crashes` holds the times of its
 * crashes, the last one included; those older than the window are dropped from it.
 */
export function shouldRestart(crashes: number[], now: number): boolean {
    while (crashes.length > 0 && now - crashes[0] > CRASH_WINDOW_MS) {
        crashes.shift();
    }
    return crashes.length <= MAX_RESTARTS;
}
