//! The clap value parsers of the options several commands share: `--target`, `--device`
//! and `--check`. (`--max-memory`'s and the `KEY=VALUE` lists' are in `options`.)

use tessera_backends::launch::{CheckMode, DeviceRequest};
use tessera_passes::Target;

/// Parses `--target` values for clap.
pub fn parse_target(s: &str) -> Result<Target, String> {
    s.parse()
}

pub fn parse_device(s: &str) -> Result<DeviceRequest, String> {
    s.parse()
}

pub fn parse_check(s: &str) -> Result<CheckMode, String> {
    s.parse()
}
