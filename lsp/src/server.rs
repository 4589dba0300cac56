//! The protocol layer: tower-lsp's `LanguageServer` over the shared state. Every request
//! runs on a database snapshot in a blocking thread, inside the session's `catch`; a panic
//! becomes an error response, a cancellation (a newer edit) becomes `ContentModified`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tessera_frontend::check::KeyValue;
use tessera_frontend::ide::{self, FoldKind, HoverSubject, SymbolKind};
use tessera_passes::session::catch;
use tessera_passes::session::{Analysis, ErrorKind as SessionErrorKind, Overrides, SessionError};
use tessera_passes::Target;
use tower_lsp::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp::lsp_types::*;
use tower_lsp::{Client, LanguageServer};

use crate::convert;
use crate::hooks;
use crate::state::{Snapshot, State};

/// How long a burst of edits must pause before its diagnostics are computed. An edit
/// that arrives when the previous diagnostics were already published is checked at
/// once (the debounce only coalesces bursts, it does not delay single keystrokes).
const DEBOUNCE: Duration = Duration::from_millis(75);

/// LSP 3.17's `RequestFailed`.
const REQUEST_FAILED: i64 = -32803;

/// What the client can render (markdown or plain text only).
#[derive(Copy, Clone, Debug, Default)]
struct ClientCaps {
    hover_markdown: bool,
    completion_markdown: bool,
    signature_markdown: bool,
}

fn supports_markdown(formats: Option<&Vec<MarkupKind>>) -> bool {
    formats.is_some_and(|f| f.contains(&MarkupKind::Markdown))
}

/// Markdown for a client that renders it, else the same text without the markup.
fn markup(value: String, markdown: bool) -> MarkupContent {
    if markdown {
        return convert::markdown(value);
    }
    let mut out = Vec::new();
    for line in value.lines() {
        if line.starts_with("```") {
            continue;
        }
        if line == "---" {
            out.push(String::new());
            continue;
        }
        let line = line.replace("**", "");
        let line = match line.strip_prefix('*').and_then(|l| l.strip_suffix('*')) {
            Some(inner) => inner.to_string(),
            None => line,
        };
        out.push(line);
    }
    MarkupContent { kind: MarkupKind::PlainText, value: out.join("\n").trim().to_string() }
}

pub struct Backend {
    client: Client,
    caps: std::sync::OnceLock<ClientCaps>,
    state: Arc<Mutex<State>>,
    /// Serializes publishing, so that a result is checked against the newest version
    /// and sent before any later one.
    publish: Arc<tokio::sync::Mutex<()>>,
    shutdown: Arc<AtomicBool>,
    /// The editor's process id to watch (0: none), from `--clientProcessId` or
    /// `initialize`.
    client_pid: Arc<AtomicU32>,
    /// Document texts, which reach the handlers as references (see `framing`).
    texts: Arc<crate::framing::Texts>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Fault injection for the robustness tests: `TESSERA_LSP_INJECT_PANIC=hover` makes
/// every `hover` request panic inside its handler (it must come back as an error);
/// `diagnostics` makes every diagnostics run panic (reported, the server goes on).
fn injected_fault() -> Option<&'static str> {
    static FAULT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FAULT.get_or_init(|| std::env::var("TESSERA_LSP_INJECT_PANIC").ok()).as_deref()
}

fn request_failed(message: impl Into<String>) -> Error {
    Error { code: ErrorCode::ServerError(REQUEST_FAILED), message: message.into().into(), data: None }
}

fn unknown_document(uri: &Url) -> Error {
    Error {
        code: ErrorCode::InvalidParams,
        message: format!("unknown document: {uri} (it is not open)").into(),
        data: None,
    }
}

/// A target from settings JSON: `{"target": "sm_80"}` or `{"tessera": {"target": ...}}`.
fn target_setting(value: &Value) -> Option<Target> {
    setting(value, "target")?.as_str()?.parse().ok()
}

/// A setting by name, at the top level or under `tessera`.
fn setting<'v>(value: &'v Value, name: &str) -> Option<&'v Value> {
    value.get(name).or_else(|| value.get("tessera").and_then(|t| t.get(name)))
}

/// `targetLints: false` leaves out the target lints (register, shared-memory, occupancy
/// and bank-conflict estimates, autotune pruning): only the frontend's checks remain.
fn target_lints_setting(value: &Value) -> Option<bool> {
    setting(value, "targetLints")?.as_bool()
}

impl Backend {
    pub fn new(
        client: Client,
        shutdown: Arc<AtomicBool>,
        client_pid: Arc<AtomicU32>,
        texts: Arc<crate::framing::Texts>,
    ) -> Backend {
        Backend {
            client,
            caps: std::sync::OnceLock::new(),
            state: Arc::new(Mutex::new(State::default())),
            publish: Arc::new(tokio::sync::Mutex::new(())),
            shutdown,
            client_pid,
            texts,
        }
    }

    /// Runs `f` on a snapshot of `uri` in a blocking thread; panics become errors.
    async fn run<T, F>(&self, uri: &Url, request: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Snapshot) -> T + Send + 'static,
    {
        let snap = lock(&self.state).snapshot(uri).ok_or_else(|| unknown_document(uri))?;
        let joined = tokio::task::spawn_blocking(move || {
            crate::memory::catch_up();
            let what = format!("handling {request}");
            let result = catch(&what, || {
                if injected_fault() == Some(request) {
                    panic!("injected fault in {request}");
                }
                f(&snap)
            });
            // Dropped before anything else: an edit waits for every snapshot.
            drop(snap);
            result
        })
        .await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if e.kind == SessionErrorKind::Internal {
                    self.client.log_message(MessageType::ERROR, &e.message).await;
                }
                Err(session_error(e))
            }
            Err(e) => Err(Error {
                code: ErrorCode::InternalError,
                message: format!("internal error while handling {request}: {e}").into(),
                data: None,
            }),
        }
    }

    /// Runs a state mutation; a panic in it is logged instead of ending the server.
    fn mutate<T>(&self, what: &str, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        let result = {
            let mut st = lock(&self.state);
            catch(&format!("handling {what}"), || f(&mut st))
        };
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                let client = self.client.clone();
                tokio::spawn(async move { client.log_message(MessageType::ERROR, e.message).await });
                None
            }
        }
    }

    fn caps(&self) -> ClientCaps {
        self.caps.get().copied().unwrap_or_default()
    }

    fn schedule_diagnostics(&self, uri: Url, version: i32, delay: Duration) {
        let state = self.state.clone();
        let client = self.client.clone();
        let publish = self.publish.clone();
        tokio::spawn(diagnostics_task(state, client, publish, uri, version, delay));
    }

    fn republish_all(&self) {
        self.republish_all_after(Duration::ZERO);
    }

    fn republish_all_after(&self, delay: Duration) {
        let docs: Vec<(Url, i32)> = lock(&self.state).docs.iter().map(|(u, d)| (u.clone(), d.version)).collect();
        for (uri, version) in docs {
            self.schedule_diagnostics(uri, version, delay);
        }
    }

    // ----- custom requests -------------------------------------------------------------

    pub async fn kernels(&self, params: KernelsParams) -> Result<Vec<KernelInfo>> {
        self.run(&params.uri, "tessera/kernels", |s| {
            ide::file_structure(&s.db, s.file)
                .into_iter()
                .filter(|sym| sym.kind != SymbolKind::Constant)
                .map(|sym| KernelInfo {
                    name: sym.name,
                    kind: sym.kind.name(),
                    range: convert::range(&s.text, &s.index, sym.range),
                    name_range: convert::range(&s.text, &s.index, sym.name_range),
                    detail: sym.detail,
                })
                .collect()
        })
        .await
    }

    pub async fn lowering(&self, params: LoweringParams) -> Result<LoweringResult> {
        const STAGES: &[&str] = &["graph", "sched", "tile", "target", "all"];
        if !STAGES.contains(&params.stage.as_str()) {
            return Err(Error::invalid_params(format!(
                "unknown stage `{}` (expected graph, sched, tile, target or all)",
                params.stage
            )));
        }
        let kernel = params.kernel.clone();
        let target: Option<Target> = match &params.target {
            Some(t) => Some(t.parse().map_err(Error::invalid_params)?),
            None => None,
        };
        let overrides = lowering_overrides(&params)?;
        let result = self
            .run(&params.uri, "tessera/lowering", move |s| {
                let target = target.unwrap_or(s.target);
                let analysis = Analysis::new(&s.db, s.file);
                let lowered = hooks::lower(&analysis, &params.kernel, &params.stage, target, &overrides)?;
                Ok(LoweringResult {
                    kernel: params.kernel,
                    stage: params.stage,
                    target: target.name().to_string(),
                    text: lowered.text,
                    source_map: lowered
                        .source_map
                        .into_iter()
                        .map(|(ir_line, range)| SourceMapEntry {
                            ir_line,
                            range: convert::range(&s.text, &s.index, range),
                        })
                        .collect(),
                })
            })
            .await?;
        result.map_err(|e: SessionError| match e.kind {
            // The request names a kernel: say so in the protocol's words.
            SessionErrorKind::NoFunction => request_failed(format!("unknown kernel: {kernel}")),
            _ => session_error(e),
        })
    }
}

/// The overrides of a `tessera/lowering` request: `schedule` values are integers or
/// strings (`{"BM": 128, "swizzle": "xor"}`), `dims` integers.
fn lowering_overrides(params: &LoweringParams) -> Result<Overrides> {
    let mut overrides = Overrides::default();
    for (key, value) in params.schedule.iter().flatten() {
        let value = match value {
            Value::Number(n) if n.is_i64() => KeyValue::Int(n.as_i64().unwrap_or_default()),
            Value::String(s) => KeyValue::Str(s.clone()),
            other => {
                return Err(Error::invalid_params(format!(
                    "schedule {key}: expected an integer or a string, got {other}"
                )))
            }
        };
        overrides.set_schedule(key, value);
    }
    overrides.dims = params.dims.clone().unwrap_or_default();
    Ok(overrides)
}

/// A session error as the protocol's: a refused override is the client's mistake
/// (InvalidParams), a cancellation asks the client to retry (ContentModified), a panic
/// is an internal error; the rest fail the request with the session's message.
fn session_error(e: SessionError) -> Error {
    match e.kind {
        SessionErrorKind::Rejected => Error::invalid_params(e.message),
        SessionErrorKind::Cancelled => Error {
            code: ErrorCode::ContentModified,
            message: "the document changed while the request was computed".into(),
            data: None,
        },
        SessionErrorKind::Internal => Error { code: ErrorCode::InternalError, message: e.message.into(), data: None },
        SessionErrorKind::NoFunction | SessionErrorKind::Lowering => request_failed(e.message),
    }
}

#[derive(Deserialize)]
pub struct KernelsParams {
    pub uri: Url,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelInfo {
    pub name: String,
    /// "kernel" | "graph" | "helper"
    pub kind: &'static str,
    /// The whole definition, decorators included.
    pub range: Range,
    pub name_range: Range,
    /// The decorators (`kernel.autotune`, `jit, autodiff`) or "helper".
    pub detail: String,
}

#[derive(Deserialize)]
pub struct LoweringParams {
    pub uri: Url,
    pub kernel: String,
    pub stage: String,
    pub target: Option<String>,
    /// Schedule overrides (`{"BM": 128}`), under the session's override rule.
    pub schedule: Option<serde_json::Map<String, Value>>,
    /// Shape-symbol values (`{"D": 128}`).
    pub dims: Option<std::collections::BTreeMap<String, i64>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceMapEntry {
    pub ir_line: u32,
    pub range: Range,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoweringResult {
    pub kernel: String,
    pub stage: String,
    pub target: String,
    pub text: String,
    pub source_map: Vec<SourceMapEntry>,
}

async fn diagnostics_task(
    state: Arc<Mutex<State>>,
    client: Client,
    publish: Arc<tokio::sync::Mutex<()>>,
    uri: Url,
    version: i32,
    delay: Duration,
) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let current = |state: &Mutex<State>| lock(state).docs.get(&uri).map(|d| d.version) == Some(version);
    let snap = {
        let st = lock(&state);
        match st.docs.get(&uri) {
            Some(d) if d.version == version => st.snapshot(&uri),
            _ => None,
        }
    };
    let Some(snap) = snap else {
        return;
    };
    let joined = tokio::task::spawn_blocking(move || {
        crate::memory::catch_up();
        let result = catch(&format!("checking {}", snap.uri), || {
            if injected_fault() == Some("diagnostics") {
                panic!("injected fault in diagnostics");
            }
            let diags = if snap.target_lints {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                tessera_passes::prefetch_lints(&snap.db, snap.file, snap.target, cores);
                tessera_passes::file_diagnostics(&snap.db, snap.file, snap.target)
            } else {
                tessera_frontend::check::file_diagnostics(&snap.db, snap.file).clone()
            };
            diags
                .iter()
                .filter(|d| snap.filter.allows(d.code))
                .map(|d| convert::diagnostic(d, &snap.uri, &snap.text, &snap.index))
                .collect::<Vec<_>>()
        });
        drop(snap);
        result
    })
    .await;
    let diagnostics = match joined {
        Ok(Ok(d)) => d,
        Ok(Err(e)) if e.is_cancelled() => return,
        Ok(Err(e)) => {
            // An internal error has no place in the source: tell the user once, keep the
            // previous diagnostics, and stay ready for the next edit.
            let message = format!("tessera: {}", e.message);
            client.log_message(MessageType::ERROR, &message).await;
            client.show_message(MessageType::ERROR, &message).await;
            if let Some(d) = lock(&state).docs.get_mut(&uri) {
                if d.version == version {
                    d.diagnostics_pending = false;
                }
            }
            return;
        }
        Err(_) => return,
    };
    let _serial = publish.lock().await;
    if !current(&state) {
        return;
    }
    client.publish_diagnostics(uri.clone(), diagnostics, Some(version)).await;
    let mut st = lock(&state);
    if let Some(d) = st.docs.get_mut(&uri) {
        d.published = Some(version);
        if d.version == version {
            d.diagnostics_pending = false;
        }
    }
}

#[tower_lsp::async_trait]
impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        // LSP: "If the parent process is not alive then the server should exit." Only a
        // process that exists now (the client may live in another PID namespace).
        if let Some(pid) = params.process_id.filter(|&p| p != 0 && crate::launch::process_alive(p)) {
            let _ = self.client_pid.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst);
        }
        if let Some(options) = &params.initialization_options {
            let mut st = lock(&self.state);
            if let Some(t) = target_setting(options) {
                st.settings_target = Some(t);
            }
            if let Some(on) = target_lints_setting(options) {
                st.target_lints = on;
            }
        }
        let text = params.capabilities.text_document.as_ref();
        let _ = self.caps.set(ClientCaps {
            hover_markdown: supports_markdown(
                text.and_then(|t| t.hover.as_ref()).and_then(|h| h.content_format.as_ref()),
            ),
            completion_markdown: supports_markdown(
                text.and_then(|t| t.completion.as_ref())
                    .and_then(|c| c.completion_item.as_ref())
                    .and_then(|i| i.documentation_format.as_ref()),
            ),
            signature_markdown: supports_markdown(
                text.and_then(|t| t.signature_help.as_ref())
                    .and_then(|s| s.signature_information.as_ref())
                    .and_then(|i| i.documentation_format.as_ref()),
            ),
        });
        let capabilities = ServerCapabilities {
            text_document_sync: Some(TextDocumentSyncCapability::Options(TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::INCREMENTAL),
                will_save: None,
                will_save_wait_until: None,
                save: Some(TextDocumentSyncSaveOptions::SaveOptions(SaveOptions { include_text: Some(false) })),
            })),
            hover_provider: Some(HoverProviderCapability::Simple(true)),
            completion_provider: Some(CompletionOptions {
                trigger_characters: Some(vec![".".into(), "@".into(), "(".into(), ",".into()]),
                resolve_provider: Some(false),
                ..CompletionOptions::default()
            }),
            signature_help_provider: Some(SignatureHelpOptions {
                trigger_characters: Some(vec!["(".into(), ",".into()]),
                retrigger_characters: Some(vec![",".into(), "=".into()]),
                work_done_progress_options: WorkDoneProgressOptions::default(),
            }),
            definition_provider: Some(OneOf::Left(true)),
            references_provider: Some(OneOf::Left(true)),
            rename_provider: Some(OneOf::Right(RenameOptions {
                prepare_provider: Some(true),
                work_done_progress_options: WorkDoneProgressOptions::default(),
            })),
            document_symbol_provider: Some(OneOf::Left(true)),
            folding_range_provider: Some(FoldingRangeProviderCapability::Simple(true)),
            semantic_tokens_provider: Some(SemanticTokensServerCapabilities::SemanticTokensOptions(
                SemanticTokensOptions {
                    legend: convert::legend(),
                    full: Some(SemanticTokensFullOptions::Bool(true)),
                    range: Some(false),
                    work_done_progress_options: WorkDoneProgressOptions::default(),
                },
            )),
            code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
                code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
                resolve_provider: Some(false),
                work_done_progress_options: WorkDoneProgressOptions::default(),
            })),
            code_lens_provider: Some(CodeLensOptions { resolve_provider: Some(false) }),
            document_formatting_provider: Some(OneOf::Left(true)),
            inlay_hint_provider: Some(OneOf::Left(true)),
            ..ServerCapabilities::default()
        };
        Ok(InitializeResult {
            capabilities,
            server_info: Some(ServerInfo {
                name: "tessera-lsp".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        self.client.log_message(MessageType::INFO, "tessera-lsp ready").await;
    }

    async fn shutdown(&self) -> Result<()> {
        self.shutdown.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let doc = params.text_document;
        let uri = doc.uri.clone();
        let version = doc.version;
        let text = self.texts.take(doc.text);
        let opened = self.mutate("didOpen", move |st| {
            st.open(doc.uri, doc.version, text);
            if let Some(d) = st.docs.get_mut(&uri) {
                d.diagnostics_pending = true;
            }
            uri
        });
        if let Some(uri) = opened {
            self.schedule_diagnostics(uri, version, Duration::ZERO);
        }
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let uri = params.text_document.uri;
        let version = params.text_document.version;
        let u = uri.clone();
        let mut changes = params.content_changes;
        for change in &mut changes {
            change.text = self.texts.take(std::mem::take(&mut change.text));
        }
        let burst = self.mutate("didChange", move |st| {
            if !st.change(&u, version, changes) {
                return None;
            }
            let d = st.docs.get_mut(&u)?;
            let burst = d.diagnostics_pending;
            d.diagnostics_pending = true;
            Some(burst)
        });
        match burst.flatten() {
            Some(burst) => {
                let delay = if burst { DEBOUNCE } else { Duration::ZERO };
                self.schedule_diagnostics(uri, version, delay);
            }
            None => {
                self.client
                    .log_message(MessageType::WARNING, format!("didChange for a document that is not open: {uri}"))
                    .await;
            }
        }
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        let uri = params.text_document.uri;
        let version = self.mutate("didSave", |st| {
            let is_toml = uri.path().ends_with("tessera.toml");
            if is_toml {
                st.reload_project_configs();
            } else if let Some(d) = st.docs.get_mut(&uri) {
                d.project = crate::state::project_config(&crate::state::path_of(&uri));
            }
            st.docs.get(&uri).map(|d| d.version)
        });
        if let Some(Some(v)) = version {
            self.schedule_diagnostics(uri, v, Duration::ZERO);
        }
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let uri = params.text_document.uri;
        let u = uri.clone();
        let rebuilt = self.mutate("didClose", move |st| st.close(&u)) == Some(true);
        crate::memory::release();
        if rebuilt {
            // The fresh database knows nothing yet: recompute the open documents'
            // diagnostics so that their next edit is incremental again, once the
            // threads that held the old database are gone.
            self.republish_all_after(crate::memory::SETTLE);
        }
        tokio::spawn(async {
            // Hand back the pages of those threads, then what the arenas still hold
            // after mimalloc's purge delay (it purges only when asked or allocating),
            // and once more after the re-analysis of the open documents, which a busy
            // machine may finish after the first rounds.
            for _ in 0..4 {
                tokio::time::sleep(crate::memory::SETTLE).await;
                crate::memory::release();
            }
        });
        let _serial = self.publish.lock().await;
        self.client.publish_diagnostics(uri, Vec::new(), None).await;
    }

    async fn did_change_configuration(&self, params: DidChangeConfigurationParams) {
        let target = target_setting(&params.settings);
        let lints = target_lints_setting(&params.settings);
        self.mutate("didChangeConfiguration", |st| {
            if target.is_some() {
                st.settings_target = target;
            }
            if let Some(on) = lints {
                st.target_lints = on;
            }
        });
        self.republish_all();
    }

    async fn did_change_watched_files(&self, params: DidChangeWatchedFilesParams) {
        if params.changes.iter().any(|c| c.uri.path().ends_with("tessera.toml")) {
            self.mutate("didChangeWatchedFiles", |st| st.reload_project_configs());
            self.republish_all();
        }
    }

    async fn hover(&self, params: HoverParams) -> Result<Option<Hover>> {
        let p = params.text_document_position_params;
        let pos = p.position;
        let md = self.caps().hover_markdown;
        self.run(&p.text_document.uri, "hover", move |s| {
            let offset = convert::offset(&s.text, &s.index, pos);
            let h = ide::hover(&s.db, s.file, offset)?;
            let mut text = h.markdown;
            let extra = match &h.subject {
                HoverSubject::Kernel { name } => Analysis::new(&s.db, s.file).kernel_hover(name, s.target),
                HoverSubject::SharedBuffer { kernel, buffer } => {
                    Analysis::new(&s.db, s.file).buffer_hover(kernel, buffer, s.target)
                }
                HoverSubject::GraphValue { function, value } => {
                    Analysis::new(&s.db, s.file).sharding_hover(function, value)
                }
                HoverSubject::Dot { kernel, at } => Analysis::new(&s.db, s.file).dot_hover(kernel, *at, s.target),
                HoverSubject::Other => None,
            };
            if let Some(extra) = extra {
                text.push_str("\n\n---\n\n");
                text.push_str(&extra);
            }
            Some(Hover {
                contents: HoverContents::Markup(markup(text, md)),
                range: Some(convert::range(&s.text, &s.index, h.range)),
            })
        })
        .await
    }

    async fn inlay_hint(&self, params: InlayHintParams) -> Result<Option<Vec<InlayHint>>> {
        let range = params.range;
        self.run(&params.text_document.uri, "inlayHint", move |s| {
            let r = convert::text_range(&s.text, &s.index, range);
            let hints = ide::inlay_hints(&s.db, s.file, Some(r))
                .into_iter()
                .map(|h| InlayHint {
                    position: convert::position(&s.text, &s.index, h.offset),
                    label: InlayHintLabel::String(h.label),
                    kind: Some(InlayHintKind::TYPE),
                    text_edits: None,
                    tooltip: None,
                    padding_left: Some(false),
                    padding_right: Some(false),
                    data: None,
                })
                .collect();
            Some(hints)
        })
        .await
    }

    async fn goto_definition(&self, params: GotoDefinitionParams) -> Result<Option<GotoDefinitionResponse>> {
        let p = params.text_document_position_params;
        let pos = p.position;
        self.run(&p.text_document.uri, "definition", move |s| {
            let offset = convert::offset(&s.text, &s.index, pos);
            let targets = ide::goto_definition(&s.db, s.file, offset);
            if targets.is_empty() {
                return None;
            }
            Some(GotoDefinitionResponse::Array(
                targets
                    .into_iter()
                    .map(|t| Location::new(s.uri.clone(), convert::range(&s.text, &s.index, t.focus)))
                    .collect(),
            ))
        })
        .await
    }

    async fn references(&self, params: ReferenceParams) -> Result<Option<Vec<Location>>> {
        let p = params.text_document_position;
        let pos = p.position;
        let include = params.context.include_declaration;
        self.run(&p.text_document.uri, "references", move |s| {
            let offset = convert::offset(&s.text, &s.index, pos);
            let refs = ide::find_references(&s.db, s.file, offset, include);
            (!refs.is_empty()).then(|| {
                refs.into_iter()
                    .map(|r| Location::new(s.uri.clone(), convert::range(&s.text, &s.index, r.range)))
                    .collect()
            })
        })
        .await
    }

    async fn prepare_rename(&self, params: TextDocumentPositionParams) -> Result<Option<PrepareRenameResponse>> {
        let pos = params.position;
        let result = self
            .run(&params.text_document.uri, "prepareRename", move |s| {
                let offset = convert::offset(&s.text, &s.index, pos);
                ide::prepare_rename(&s.db, s.file, offset)
                    .map(|r| PrepareRenameResponse::Range(convert::range(&s.text, &s.index, r)))
                    .map_err(|e| e.to_string())
            })
            .await?;
        result.map(Some).map_err(request_failed)
    }

    async fn rename(&self, params: RenameParams) -> Result<Option<WorkspaceEdit>> {
        let p = params.text_document_position;
        let pos = p.position;
        let new_name = params.new_name;
        let result = self
            .run(&p.text_document.uri, "rename", move |s| {
                let offset = convert::offset(&s.text, &s.index, pos);
                let edits = ide::rename(&s.db, s.file, offset, &new_name).map_err(|e| e.to_string())?;
                let edits: Vec<TextEdit> = edits
                    .into_iter()
                    .map(|e| TextEdit::new(convert::range(&s.text, &s.index, e.range), e.text))
                    .collect();
                Ok::<_, String>(WorkspaceEdit {
                    changes: Some(HashMap::from([(s.uri.clone(), edits)])),
                    ..WorkspaceEdit::default()
                })
            })
            .await?;
        result.map(Some).map_err(request_failed)
    }

    async fn completion(&self, params: CompletionParams) -> Result<Option<CompletionResponse>> {
        let p = params.text_document_position;
        let pos = p.position;
        let md = self.caps().completion_markdown;
        self.run(&p.text_document.uri, "completion", move |s| {
            let offset = convert::offset(&s.text, &s.index, pos);
            let c = ide::completions(&s.db, s.file, offset);
            let replace = convert::range(&s.text, &s.index, c.replace);
            let items = c
                .items
                .into_iter()
                .map(|i| CompletionItem {
                    kind: Some(convert::completion_kind(i.kind)),
                    detail: i.detail,
                    documentation: i.documentation.map(|d| Documentation::MarkupContent(markup(d, md))),
                    sort_text: Some(i.sort_text),
                    filter_text: Some(i.label.clone()),
                    text_edit: Some(CompletionTextEdit::Edit(TextEdit::new(
                        replace,
                        i.insert_text.unwrap_or_else(|| i.label.clone()),
                    ))),
                    label: i.label,
                    ..CompletionItem::default()
                })
                .collect();
            Some(CompletionResponse::List(CompletionList { is_incomplete: false, items }))
        })
        .await
    }

    async fn signature_help(&self, params: SignatureHelpParams) -> Result<Option<SignatureHelp>> {
        let p = params.text_document_position_params;
        let pos = p.position;
        let md = self.caps().signature_markdown;
        self.run(&p.text_document.uri, "signatureHelp", move |s| {
            let offset = convert::offset(&s.text, &s.index, pos);
            let h = ide::signature_help(&s.db, s.file, offset)?;
            let parameters = h
                .params
                .iter()
                .map(|&(a, b)| ParameterInformation {
                    label: ParameterLabel::LabelOffsets([
                        convert::utf16_len(&h.label[..a as usize]),
                        convert::utf16_len(&h.label[..b as usize]),
                    ]),
                    documentation: None,
                })
                .collect();
            Some(SignatureHelp {
                signatures: vec![SignatureInformation {
                    label: h.label,
                    documentation: h.documentation.map(|d| Documentation::MarkupContent(markup(d, md))),
                    parameters: Some(parameters),
                    active_parameter: h.active_param,
                }],
                active_signature: Some(0),
                active_parameter: h.active_param,
            })
        })
        .await
    }

    async fn document_symbol(&self, params: DocumentSymbolParams) -> Result<Option<DocumentSymbolResponse>> {
        self.run(&params.text_document.uri, "documentSymbol", |s| {
            #[allow(deprecated)] // `deprecated` is a required field of the struct.
            let symbols = ide::file_structure(&s.db, s.file)
                .into_iter()
                .map(|sym| DocumentSymbol {
                    name: sym.name,
                    detail: (!sym.detail.is_empty()).then_some(sym.detail),
                    kind: match sym.kind {
                        SymbolKind::Constant => tower_lsp::lsp_types::SymbolKind::CONSTANT,
                        _ => tower_lsp::lsp_types::SymbolKind::FUNCTION,
                    },
                    tags: None,
                    deprecated: None,
                    range: convert::range(&s.text, &s.index, sym.range),
                    selection_range: convert::range(&s.text, &s.index, sym.name_range),
                    children: None,
                })
                .collect();
            Some(DocumentSymbolResponse::Nested(symbols))
        })
        .await
    }

    async fn folding_range(&self, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
        self.run(&params.text_document.uri, "foldingRange", |s| {
            let mut by_line: Vec<FoldingRange> = Vec::new();
            for f in ide::folding_ranges(&s.db, s.file) {
                let start = s.index.line_of(f.range.start);
                // A range ending right after a newline ends on the previous line.
                let mut end_off = f.range.end;
                if end_off > f.range.start && s.text.as_bytes().get(end_off as usize - 1) == Some(&b'\n') {
                    end_off -= 1;
                }
                let end = s.index.line_of(end_off);
                if end <= start {
                    continue;
                }
                if let Some(prev) = by_line.iter_mut().find(|r| r.start_line == start) {
                    prev.end_line = prev.end_line.max(end);
                    continue;
                }
                by_line.push(FoldingRange {
                    start_line: start,
                    start_character: None,
                    end_line: end,
                    end_character: None,
                    kind: Some(match f.kind {
                        FoldKind::Region => FoldingRangeKind::Region,
                        FoldKind::Comment => FoldingRangeKind::Comment,
                        FoldKind::Imports => FoldingRangeKind::Imports,
                    }),
                    collapsed_text: None,
                });
            }
            Some(by_line)
        })
        .await
    }

    async fn semantic_tokens_full(&self, params: SemanticTokensParams) -> Result<Option<SemanticTokensResult>> {
        self.run(&params.text_document.uri, "semanticTokens", |s| {
            let ranges = ide::highlight(&s.db, s.file);
            Some(SemanticTokensResult::Tokens(SemanticTokens {
                result_id: None,
                data: convert::semantic_tokens(&s.text, &s.index, &ranges),
            }))
        })
        .await
    }

    async fn code_action(&self, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
        let range = params.range;
        self.run(&params.text_document.uri, "codeAction", move |s| {
            let want = convert::text_range(&s.text, &s.index, range);
            let diags = if s.target_lints {
                tessera_passes::file_diagnostics(&s.db, s.file, s.target)
            } else {
                tessera_frontend::check::file_diagnostics(&s.db, s.file).clone()
            };
            let actions: Vec<CodeActionOrCommand> = diags
                .iter()
                .filter(|d| s.filter.allows(d.code))
                .filter(|d| d.range.intersects(want) || d.range.touches(want.start) || want.touches(d.range.start))
                .filter_map(|d| {
                    let fix = d.fix.as_ref()?;
                    let edits: Vec<TextEdit> = fix
                        .edits
                        .iter()
                        .map(|e| TextEdit::new(convert::range(&s.text, &s.index, e.range), e.text.clone()))
                        .collect();
                    Some(CodeActionOrCommand::CodeAction(CodeAction {
                        title: fix.message.clone(),
                        kind: Some(CodeActionKind::QUICKFIX),
                        diagnostics: Some(vec![convert::diagnostic(d, &s.uri, &s.text, &s.index)]),
                        edit: Some(WorkspaceEdit {
                            changes: Some(HashMap::from([(s.uri.clone(), edits)])),
                            ..WorkspaceEdit::default()
                        }),
                        command: None,
                        is_preferred: Some(true),
                        disabled: None,
                        data: None,
                    }))
                })
                .collect();
            Some(actions)
        })
        .await
    }

    async fn code_lens(&self, params: CodeLensParams) -> Result<Option<Vec<CodeLens>>> {
        self.run(&params.text_document.uri, "codeLens", |s| {
            let uri = Value::String(s.uri.to_string());
            let lenses = ide::file_structure(&s.db, s.file)
                .into_iter()
                .filter(|sym| sym.kind == SymbolKind::Kernel)
                .flat_map(|sym| {
                    let range = convert::range(&s.text, &s.index, sym.name_range);
                    let args = vec![uri.clone(), Value::String(sym.name.clone())];
                    [("▶ Explore", "tessera.explore"), ("⚡ Run", "tessera.run")].map(|(title, command)| CodeLens {
                        range,
                        command: Some(Command {
                            title: title.into(),
                            command: command.into(),
                            arguments: Some(args.clone()),
                        }),
                        data: None,
                    })
                })
                .collect();
            Some(lenses)
        })
        .await
    }

    async fn formatting(&self, params: DocumentFormattingParams) -> Result<Option<Vec<TextEdit>>> {
        let result = self
            .run(&params.text_document.uri, "formatting", |s| {
                let text = s.text.clone();
                let end = convert::position(&text, &s.index, text.len() as u32);
                (text, end)
            })
            .await?;
        let (text, end) = result;
        // The formatter needs only the text: run it without holding a snapshot.
        let formatted = tokio::task::spawn_blocking(move || {
            crate::memory::catch_up();
            catch("formatting", || tessera_frontend::format::format_source(&text)).map(|r| (r, text))
        })
        .await
        .map_err(|e| Error {
            code: ErrorCode::InternalError,
            message: format!("internal error in formatting: {e}").into(),
            data: None,
        })?;
        match formatted {
            Ok((Ok(new), old)) if new == *old => Ok(Some(Vec::new())),
            Ok((Ok(new), _)) => Ok(Some(vec![TextEdit::new(Range::new(Position::new(0, 0), end), new)])),
            Ok((Err(e), _)) => Err(request_failed(e.to_string())),
            Err(e) => Err(Error { code: ErrorCode::InternalError, message: e.message.into(), data: None }),
        }
    }
}
