//! `tessera devices`: what this machine can run kernels and collectives on, and why not
//! where it cannot (the same probes `tessera run --device auto` uses).

use tessera_backends::launch::{availability, Device};

pub fn run() -> Result<i32, String> {
    for device in [Device::Gpu, Device::Cpu, Device::Interpreter] {
        let line = match availability(device) {
            Ok(description) => format!("yes: {description}"),
            Err(why) => format!("no: {why}"),
        };
        println!("{:<12} {line}", device.name());
    }
    let nccl = match tessera_backends::nccl::probe() {
        Ok(info) => format!("yes: NCCL {}", info.version),
        Err(why) => format!("no: {}", why.strip_prefix("no NCCL: ").unwrap_or(&why)),
    };
    println!("{:<12} {nccl}", "nccl");
    Ok(0)
}
