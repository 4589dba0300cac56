//! The command line of `tessera-lsp` and `tessera lsp`, as editors launch them.
//!
//! LSP clients append their own flags: `--stdio` (VS Code's `TransportKind.stdio`),
//! `--clientProcessId N` or `--clientProcessId=N` (the editor's process; the server
//! exits when it is gone, as the `processId` of `initialize` also asks). Standard input
//! and output are the only transport: `--node-ipc`, `--socket` and `--pipe` are refused
//! with a clear message rather than ignored.

use std::ffi::OsString;

const USAGE: &str = "\
tessera-lsp: the Tessera language server (the Language Server Protocol on stdin/stdout)

Usage: tessera-lsp [--stdio] [--clientProcessId <PID>]
       tessera lsp [--stdio] [--clientProcessId <PID>]

Options:
  --stdio                  Talk over standard input and output (the default, and the only
                           transport)
  --clientProcessId <PID>  The editor's process: exit when it is gone (the processId of
                           `initialize` does the same)
  -h, --help               Print this help
  -V, --version            Print the version

Exit status: 0 after `shutdown` then `exit` (or the end of the input), 1 when the input
ends or `exit` comes without a `shutdown`, 2 for a bad command line.
";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Launch {
    Serve {
        client_pid: Option<u32>,
    },
    Help,
    Version,
    /// A bad command line: the message to print (exit 2).
    Error(String),
}

fn pid(value: &str) -> Result<u32, String> {
    value.trim().parse::<u32>().map_err(|_| format!("--clientProcessId needs a process id, not `{value}`"))
}

/// Parses the arguments after the program name (`tessera-lsp`) or the subcommand
/// (`tessera lsp`).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Launch {
    let mut client_pid = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(arg) = arg.to_str().map(str::to_owned) else {
            return Launch::Error(format!("unexpected argument `{}`", arg.to_string_lossy()));
        };
        match arg.as_str() {
            "--stdio" => {}
            "-h" | "--help" => return Launch::Help,
            "-V" | "--version" => return Launch::Version,
            "--clientProcessId" => match args.next() {
                Some(v) => match pid(&v.to_string_lossy()) {
                    Ok(p) => client_pid = Some(p),
                    Err(e) => return Launch::Error(e),
                },
                None => return Launch::Error("--clientProcessId needs a process id".into()),
            },
            _ => {
                if let Some(v) = arg.strip_prefix("--clientProcessId=") {
                    match pid(v) {
                        Ok(p) => client_pid = Some(p),
                        Err(e) => return Launch::Error(e),
                    }
                } else if ["--node-ipc", "--socket", "--pipe"]
                    .iter()
                    .any(|t| arg == *t || arg.starts_with(&format!("{t}=")))
                {
                    return Launch::Error(format!(
                        "`{arg}`: this server talks only over standard input and output (use --stdio)"
                    ));
                } else {
                    return Launch::Error(format!("unexpected argument `{arg}`"));
                }
            }
        }
    }
    Launch::Serve { client_pid }
}

/// Runs the server as the command line asks; returns the exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    match parse(args) {
        Launch::Serve { client_pid } => crate::run_stdio_for(client_pid),
        Launch::Help => {
            print!("{USAGE}");
            0
        }
        Launch::Version => {
            println!("tessera-lsp {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Launch::Error(message) => {
            eprintln!(
                "tessera-lsp: {message}\nUsage: tessera-lsp [--stdio] [--clientProcessId <PID>] (--help for more)"
            );
            2
        }
    }
}

/// Whether process `pid` still exists (where that can be told: Linux's `/proc`).
pub fn process_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Launch {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn flags_as_clients_send_them() {
        assert_eq!(parse_strs(&[]), Launch::Serve { client_pid: None });
        assert_eq!(parse_strs(&["--stdio"]), Launch::Serve { client_pid: None });
        assert_eq!(parse_strs(&["--stdio", "--clientProcessId", "42"]), Launch::Serve { client_pid: Some(42) });
        assert_eq!(parse_strs(&["--clientProcessId=7", "--stdio"]), Launch::Serve { client_pid: Some(7) });
        assert_eq!(parse_strs(&["--stdio", "--version"]), Launch::Version);
        assert_eq!(parse_strs(&["-h"]), Launch::Help);
        for bad in [&["--clientProcessId"][..], &["--clientProcessId=x"], &["--socket=5000"], &["--node-ipc"], &["lsp"]]
        {
            assert!(matches!(parse_strs(bad), Launch::Error(_)), "{bad:?}");
        }
    }
}
