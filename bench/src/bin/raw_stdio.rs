//! The stdio limit: reads each line, parses it with serde_json, writes a fixed-shape reply
//! serialized with serde_json; flushes when no more input is buffered.

use std::io::{BufRead, BufReader, BufWriter, Write};

fn main() -> std::io::Result<()> {
    let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut output = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return output.flush();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some(reply) = modelctx_bench::raw_reply(&line) {
            output.write_all(&reply)?;
            output.write_all(b"\n")?;
        }
        if input.buffer().is_empty() {
            output.flush()?;
        }
    }
}
