//! A picture of a Jaeger trace page with one span's details open: headless
//! Chromium driven through the DevTools protocol over a pipe
//! (`--remote-debugging-pipe`: commands in on descriptor 3, answers out on
//! 4, each a JSON message ending in a NUL byte), since `--screenshot`
//! alone cannot click. No library: the messages are `serde_json` values,
//! and the picture comes back in base64.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::util::which;

/// How long the page may take to show its spans.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// One browser, one page, spoken to in DevTools messages.
struct Browser {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    next_id: u64,
    session: Option<String>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts headless Chromium with a profile under `profile`, its
    /// descriptors 3 and 4 the pipe (stdin and stdout, renumbered by `sh`).
    fn start(profile: &Path) -> Result<Browser> {
        let chromium = which("chromium").ok_or_else(|| anyhow!("chromium not found"))?;
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            // The machine's network is closed: no calls home.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
        ];
        let mut child = Command::new("sh")
            .arg("-c")
            // 3 reads what we write, 4 writes what we read; Chromium's own
            // stdout goes to stderr, its stdin is nothing.
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 1>&2 0</dev/null")
            .arg(&chromium)
            .args(args)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("running chromium")?;
        let to = child.stdin.take().expect("piped stdin");
        let from = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Browser {
            child,
            to,
            from,
            next_id: 1,
            session: None,
        })
    }

    /// Sends `method` with `params` (to the attached page, once there is
    /// one) and returns its result, skipping the events that come between.
    fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message)?;
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .and_then(|()| self.to.flush())
            .with_context(|| format!("sending {method} to chromium"))?;
        loop {
            let mut answer = Vec::new();
            let n = self.from.read_until(0, &mut answer)?;
            if n == 0 {
                bail!("chromium closed the pipe while {method} was pending");
            }
            answer.pop();
            let value: Value = serde_json::from_slice(&answer)
                .with_context(|| format!("a DevTools message that is not JSON ({method})"))?;
            if value["id"] != json!(id) {
                continue;
            }
            if let Some(error) = value.get("error") {
                bail!("{method}: {error}");
            }
            return Ok(value["result"].clone());
        }
    }

    /// The value of `expression` in the page.
    fn eval(&mut self, expression: &str) -> Result<Value> {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        )?;
        if let Some(thrown) = result.get("exceptionDetails") {
            bail!("{expression}: {thrown}");
        }
        Ok(result["result"]["value"].clone())
    }

    /// Polls `expression` until it is `true`, up to `timeout`.
    fn wait_for(&mut self, expression: &str, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.eval(expression)? == json!(true) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("the page did not show `{expression}` within {timeout:?}")
    }
}

/// Opens `url` (a Jaeger trace page) in a `window` (`W,H`), opens the
/// details of the first span named `span`, and writes the picture to `png`.
pub fn screenshot_with_span_open(url: &str, png: &Path, window: &str, span: &str) -> Result<()> {
    capture(url, png, window, |browser| {
        // The timeline's rows, then the wanted span's name, clicked: its
        // details open under it.
        let named = serde_json::to_string(span)?;
        let rows = format!(
            "Array.from(document.querySelectorAll('a.span-name')).filter(a => \
             a.textContent.includes({named}))"
        );
        browser.wait_for(&format!("{rows}.length > 0"), LOAD_TIMEOUT)?;
        browser.eval(&format!("{rows}[0].click(), true"))?;
        open_sections(browser, 1)
    })
}

/// Opens `url` (a Jaeger trace page) in a `window` (`W,H`) with the spans
/// whose ids are `ids` found (the UI's `uiFind`, which marks their rows),
/// opens each's details with its tags and references, and writes the
/// picture to `png`.
pub fn screenshot_with_spans_found(
    url: &str,
    png: &Path,
    window: &str,
    ids: &[String],
) -> Result<()> {
    let found = format!("{url}?uiFind={}", ids.join("%20"));
    capture(&found, png, window, |browser| {
        let rows = "document.querySelectorAll('.span-row.is-matching-filter')";
        browser.wait_for(&format!("{rows}.length >= {}", ids.len()), LOAD_TIMEOUT)?;
        // The UI opens the details of the spans it finds; those it has not
        // opened, clicked.
        browser.eval(
            "document.querySelectorAll('.span-row.is-matching-filter:not(.is-expanded) \
             a.span-name').forEach(a => a.click()), true",
        )?;
        open_sections(browser, ids.len())
    })
}

/// In the `open` span details on the page, opens the tags' table and the
/// references' list (where a span has one) where they are closed.
fn open_sections(browser: &mut Browser, open: usize) -> Result<()> {
    browser.wait_for(
        &format!("document.querySelectorAll('.detail-row').length >= {open}"),
        Duration::from_secs(10),
    )?;
    let headers = "Array.from(document.querySelectorAll('.detail-row \
                   .AccordianKeyValues--header, .detail-row .AccordianReferences--header')).filter(h \
                   => h.textContent.startsWith('Tags') || h.textContent.startsWith('References'))";
    browser.wait_for(
        &format!("{headers}.length >= {open}"),
        Duration::from_secs(10),
    )?;
    browser.eval(&format!(
        "{headers}.filter(h => h.getAttribute('aria-checked') !== 'true' && \
         !h.classList.contains('is-open')).forEach(h => h.click()), true"
    ))?;
    browser.wait_for(
        &format!("document.querySelectorAll('.detail-row .KeyValueTable').length >= {open}"),
        Duration::from_secs(10),
    )
}

/// Opens `url` in a `window` (`W,H`), lets `act` click through the page,
/// and writes the picture to `png`.
fn capture(
    url: &str,
    png: &Path,
    window: &str,
    act: impl FnOnce(&mut Browser) -> Result<()>,
) -> Result<()> {
    let (width, height) = window
        .split_once(',')
        .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)))
        .ok_or_else(|| anyhow!("window `{window}` is not W,H"))?;
    let profile = std::env::temp_dir().join(format!("kspan-devtools-{}", std::process::id()));
    // So that an old picture cannot pass for a new one.
    if png.exists() {
        std::fs::remove_file(png).with_context(|| format!("removing the old {}", png.display()))?;
    }
    let shot = (|| -> Result<Vec<u8>> {
        let mut browser = Browser::start(&profile)?;
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }))?;
        let target = target["targetId"]
            .as_str()
            .ok_or_else(|| anyhow!("no targetId in {target}"))?
            .to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        )?;
        browser.session = Some(
            attached["sessionId"]
                .as_str()
                .ok_or_else(|| anyhow!("no sessionId in {attached}"))?
                .to_owned(),
        );
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )?;
        browser.call("Page.navigate", json!({ "url": url }))?;
        act(&mut browser)?;
        // The UI's fonts and layout settle.
        std::thread::sleep(Duration::from_secs(1));
        let picture = browser.call("Page.captureScreenshot", json!({ "format": "png" }))?;
        let data = picture["data"]
            .as_str()
            .ok_or_else(|| anyhow!("no picture in the answer"))?;
        let _ = browser.call("Browser.close", json!({}));
        base64_decode(data)
    })();
    let _ = std::fs::remove_dir_all(&profile);
    let bytes = shot?;
    std::fs::write(png, bytes).with_context(|| format!("writing {}", png.display()))
}

/// Standard base64 (with padding) to bytes.
fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let value = |c: u8| -> Result<u32> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("`{}` in base64", c as char),
        } as u32)
    };
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut word = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            word |= value(c)? << (18 - 6 * i);
        }
        let bytes = word.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_every_length() {
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("Zg==").unwrap(), b"f");
        assert_eq!(base64_decode("Zm8=").unwrap(), b"fo");
        assert_eq!(base64_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(base64_decode("Zm9vYmFy").unwrap(), b"foobar");
        assert_eq!(base64_decode("iVBORw0K").unwrap(), b"\x89PNG\r\n");
        assert!(base64_decode("Zm9v!").is_err());
    }
}
