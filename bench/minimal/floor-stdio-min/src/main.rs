//! B1's floor: reads JSON lines on stdin and writes each back, with no MCP in between. It uses
//! what every Rust stdio MCP server compiles (tokio, serde's derive, serde_json), so its clean
//! build is what no MCP crate can beat.

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(serde::Deserialize, serde::Serialize)]
struct Line(serde_json::Value);

fn main() -> std::io::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines.next_line().await? {
            if let Ok(Line(value)) = serde_json::from_str(&line) {
                let mut out = serde_json::to_vec(&Line(value))?;
                out.push(b'\n');
                stdout.write_all(&out).await?;
                stdout.flush().await?;
            }
        }
        Ok(())
    })
}
