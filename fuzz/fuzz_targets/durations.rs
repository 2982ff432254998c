//! Any text as a duration flag's value, straight into `config::duration::parse_duration`: a
//! clear error for anything that is not a duration, never a panic.

#![no_main]

use egress_address::config::duration::parse_duration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        if let Ok(text) = std::str::from_utf8(data) {
            match parse_duration(text) {
                Ok(_) => {}
                Err(message) => assert!(message.contains("duration"), "{message}"),
            }
        }
    })
});
