//! Zed extension for Tessera (`.tsr`): starts the language server `tessera-lsp`.
//!
//! Zed calls [`zed::Extension::language_server_command`] for the server declared in
//! `extension.toml` (`[language_servers.tessera-lsp]`). The command is, in this order:
//!
//! 1. `lsp.tessera-lsp.binary.path` from Zed's settings, with `binary.arguments` and
//!    `binary.env` when given;
//! 2. `tessera-lsp` found on the worktree's `PATH`;
//! 3. the `tessera` CLI found on the `PATH`, run as `tessera lsp`;
//!
//! and otherwise an error that says how to install the server or point Zed at it. The
//! settings' `initialization_options` and `settings` are passed to the server as its
//! initialization options and workspace configuration.

use zed_extension_api::{
    self as zed,
    settings::{CommandSettings, LspSettings},
    LanguageServerId, Result,
};

/// The language server's own binary.
pub const SERVER_BINARY: &str = "tessera-lsp";
/// The command-line tool, which runs the same server as `tessera lsp`.
pub const CLI_BINARY: &str = "tessera";

/// A resolved server command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCommand {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The default arguments of a server program: `lsp` for the CLI, none for `tessera-lsp`.
fn default_args(program: &str) -> Vec<String> {
    let name = program.rsplit(['/', '\\']).next().unwrap_or(program);
    let name = name.strip_suffix(".exe").unwrap_or(name);
    if name == CLI_BINARY {
        vec!["lsp".to_string()]
    } else {
        Vec::new()
    }
}

/// The message shown in Zed when no server is found.
pub fn not_found_message() -> String {
    format!(
        "the Tessera language server was not found: neither `{SERVER_BINARY}` nor `{CLI_BINARY}` \
         is on the PATH of this worktree. Install it (from a Tessera checkout: \
         `cargo install --path . --bin {SERVER_BINARY}`), or set its path in Zed's settings: \
         {{ \"lsp\": {{ \"{SERVER_BINARY}\": {{ \"binary\": {{ \"path\": \"/path/to/{SERVER_BINARY}\" }} }} }} }}"
    )
}

/// Resolves the server command from the user's `binary` settings, a `which` lookup on the
/// worktree's `PATH`, and the worktree's shell environment (consulted only when used).
/// Variables from `binary.env` override the shell environment's.
pub fn resolve_command(
    binary: Option<&CommandSettings>,
    which: impl Fn(&str) -> Option<String>,
    shell_env: impl FnOnce() -> Vec<(String, String)>,
) -> Result<ServerCommand> {
    let configured_path = binary.and_then(|b| b.path.clone()).filter(|p| !p.trim().is_empty());
    let command = match configured_path {
        Some(path) => path,
        None => which(SERVER_BINARY).or_else(|| which(CLI_BINARY)).ok_or_else(not_found_message)?,
    };
    let args = binary.and_then(|b| b.arguments.clone()).unwrap_or_else(|| default_args(&command));
    let mut env = shell_env();
    if let Some(extra) = binary.and_then(|b| b.env.as_ref()) {
        let mut extra: Vec<_> = extra.iter().collect();
        extra.sort();
        for (key, value) in extra {
            env.retain(|(k, _)| k != key);
            env.push((key.clone(), value.clone()));
        }
    }
    Ok(ServerCommand { command, args, env })
}

struct TesseraExtension;

impl TesseraExtension {
    fn settings(language_server_id: &LanguageServerId, worktree: &zed::Worktree) -> LspSettings {
        LspSettings::for_worktree(language_server_id.as_ref(), worktree).unwrap_or_default()
    }
}

impl zed::Extension for TesseraExtension {
    fn new() -> Self {
        TesseraExtension
    }

    fn language_server_command(
        &mut self,
        language_server_id: &LanguageServerId,
        worktree: &zed::Worktree,
    ) -> Result<zed::Command> {
        let settings = Self::settings(language_server_id, worktree);
        let resolved = resolve_command(settings.binary.as_ref(), |name| worktree.which(name), || worktree.shell_env())?;
        Ok(zed::Command { command: resolved.command, args: resolved.args, env: resolved.env })
    }

    fn language_server_initialization_options(
        &mut self,
        language_server_id: &LanguageServerId,
        worktree: &zed::Worktree,
    ) -> Result<Option<zed::serde_json::Value>> {
        Ok(Self::settings(language_server_id, worktree).initialization_options)
    }

    fn language_server_workspace_configuration(
        &mut self,
        language_server_id: &LanguageServerId,
        worktree: &zed::Worktree,
    ) -> Result<Option<zed::serde_json::Value>> {
        Ok(Self::settings(language_server_id, worktree).settings)
    }
}

zed::register_extension!(TesseraExtension);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn on_path(names: &'static [&'static str]) -> impl Fn(&str) -> Option<String> {
        move |name| names.contains(&name).then(|| format!("/usr/bin/{name}"))
    }

    fn shell() -> Vec<(String, String)> {
        vec![("PATH".into(), "/usr/bin".into()), ("HOME".into(), "/home/u".into())]
    }

    fn binary(path: Option<&str>, args: Option<&[&str]>, env: &[(&str, &str)]) -> CommandSettings {
        CommandSettings {
            path: path.map(str::to_string),
            arguments: args.map(|a| a.iter().map(|s| s.to_string()).collect()),
            env: (!env.is_empty())
                .then(|| env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>()),
        }
    }

    #[test]
    fn finds_tessera_lsp_on_the_path() {
        let c = resolve_command(None, on_path(&["tessera-lsp", "tessera"]), shell).unwrap();
        assert_eq!(c.command, "/usr/bin/tessera-lsp");
        assert!(c.args.is_empty());
        assert_eq!(c.env, shell());
    }

    #[test]
    fn falls_back_to_the_cli() {
        let c = resolve_command(None, on_path(&["tessera"]), shell).unwrap();
        assert_eq!(c.command, "/usr/bin/tessera");
        assert_eq!(c.args, ["lsp"]);
    }

    #[test]
    fn a_missing_server_is_a_clear_error() {
        let err = resolve_command(None, on_path(&[]), shell).unwrap_err();
        assert!(err.contains("`tessera-lsp`"), "{err}");
        assert!(err.contains("\"binary\""), "{err}");
        assert!(err.contains("cargo install"), "{err}");
    }

    #[test]
    fn the_settings_path_wins_and_is_not_looked_up() {
        let b = binary(Some("/opt/tessera/bin/tessera-lsp"), None, &[]);
        let c = resolve_command(Some(&b), |_| panic!("no PATH lookup"), shell).unwrap();
        assert_eq!(c.command, "/opt/tessera/bin/tessera-lsp");
        assert!(c.args.is_empty());
        let b = binary(Some("/opt/tessera/bin/tessera"), None, &[]);
        assert_eq!(resolve_command(Some(&b), on_path(&[]), shell).unwrap().args, ["lsp"]);
        let b = binary(Some(r"C:\tessera\tessera.exe"), None, &[]);
        assert_eq!(resolve_command(Some(&b), on_path(&[]), shell).unwrap().args, ["lsp"]);
    }

    #[test]
    fn settings_arguments_and_env() {
        let b = binary(None, Some(&["--log", "debug"]), &[("HOME", "/tmp"), ("RUST_LOG", "info")]);
        let c = resolve_command(Some(&b), on_path(&["tessera-lsp"]), shell).unwrap();
        assert_eq!(c.command, "/usr/bin/tessera-lsp");
        assert_eq!(c.args, ["--log", "debug"]);
        assert_eq!(
            c.env,
            [("PATH", "/usr/bin"), ("HOME", "/tmp"), ("RUST_LOG", "info")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
        // An empty path in the settings means "not set".
        let b = binary(Some("  "), None, &[]);
        let c = resolve_command(Some(&b), on_path(&["tessera-lsp"]), shell).unwrap();
        assert_eq!(c.command, "/usr/bin/tessera-lsp");
    }
}
