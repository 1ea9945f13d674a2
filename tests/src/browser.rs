//! A plan's page opened in Debian's headless Chromium, as a reviewer's browser opens it. Every
//! request the browser makes goes through a loopback proxy of ours, which serves the page and
//! keeps each request line: a page that loads anything else (a script, a font, an image from
//! elsewhere) is seen asking for it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Debian's headless Chromium (package chromium-headless-shell; `make test` installs it).
pub const CHROMIUM: &str = "chromium-headless-shell";

/// Where the page is served from, through the proxy.
const PAGE_URL: &str = "http://plan.test/plan.html";

/// The page as the browser left it, and every request it made.
pub struct Opened {
    /// The DOM after the page loaded, serialized (`--dump-dom`).
    pub dom: String,
    /// Request lines, as the proxy received them (`GET http://plan.test/plan.html HTTP/1.1`).
    pub requests: Vec<String>,
}

/// Opens `page` (HTML) and returns its DOM, or takes a `width`×`height` screenshot of it into
/// `screenshot` (then the DOM is empty).
pub fn open(page: &str, screenshot: Option<(&Path, u32, u32)>) -> Opened {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (seen, body) = (requests.clone(), page.to_string());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            serve(stream, &body, &seen);
        }
    });
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--proxy-bypass-list=<-loopback>",
    ])
    .arg(format!("--proxy-server=http://127.0.0.1:{port}"))
    .arg(format!("--user-data-dir={}", profile.path().display()));
    match screenshot {
        Some((file, width, height)) => {
            cmd.arg(format!("--screenshot={}", file.display()))
                .arg(format!("--window-size={width},{height}"));
        }
        None => {
            cmd.arg("--dump-dom");
        }
    }
    let out = cmd.arg(PAGE_URL).output().unwrap_or_else(|e| {
        panic!("{CHROMIUM} runs (make test installs it from Debian's packages): {e}")
    });
    assert!(
        out.status.success(),
        "{CHROMIUM}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = requests.lock().unwrap().clone();
    Opened {
        dom: String::from_utf8(out.stdout).expect("a UTF-8 DOM"),
        requests,
    }
}

/// Answers one proxied request: the page for [`PAGE_URL`], 404 for anything else.
fn serve(stream: TcpStream, page: &str, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let line = line.trim_end().to_string();
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(n) if n > 2 => continue,
            _ => break,
        }
    }
    let ours = line == format!("GET {PAGE_URL} HTTP/1.1");
    seen.lock().unwrap().push(line);
    let mut stream = reader.into_inner();
    let response = if ours {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
            page.len()
        )
    } else {
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
    };
    let _ = stream.write_all(response.as_bytes());
}

/// Asserts that the browser asked for the page and nothing else.
pub fn assert_only_the_page(opened: &Opened) {
    assert_eq!(
        opened.requests,
        [format!("GET {PAGE_URL} HTTP/1.1")],
        "the page asked for something besides itself"
    );
}

/// The attributes of each `<TAG …>` element of `dom` whose class has the word `class`.
pub fn elements(dom: &str, tag: &str, class: &str) -> Vec<BTreeMap<String, String>> {
    let open = format!("<{tag} ");
    let mut found = Vec::new();
    for (at, _) in dom.match_indices(&open) {
        let rest = &dom[at + open.len()..];
        let Some(end) = rest.find('>') else { continue };
        let attrs = attributes(&rest[..end]);
        let classes = attrs.get("class").map(String::as_str).unwrap_or("");
        if classes.split(' ').any(|c| c == class) {
            found.push(attrs);
        }
    }
    found
}

/// `name="value"` pairs, as a browser serializes them (values' `&`, `<`, `>`, `"` escaped).
fn attributes(text: &str) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    let mut rest = text.trim();
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim().to_string();
        let value_and_more = &rest[eq + 2..];
        let close = value_and_more.find('"').unwrap_or(value_and_more.len());
        let value = (value_and_more[..close]
            .replace("&quot;", "\"")
            .replace("&lt;", "<"))
        .replace("&gt;", ">")
        .replace("&amp;", "&");
        attrs.insert(name, value);
        rest = value_and_more.get(close + 1..).unwrap_or("").trim_start();
    }
    attrs
}

/// What the plan page's timeline and table must show of a JSON plan: every batch of every group,
/// with its estimate (likely start and end, cautious end) and its forecast's word.
pub fn assert_page_shows_plan(dom: &str, plan: &Value) {
    let bars = elements(dom, "g", "batch");
    let rows = elements(dom, "tr", "batch");
    let mut batches = 0;
    for group in plan["groups"].as_array().unwrap() {
        let name = group["name"].as_str().unwrap();
        for (index, batch) in group["batches"].as_array().unwrap().iter().enumerate() {
            batches += 1;
            let wanted = |a: &&BTreeMap<String, String>| {
                a.get("data-row").map(String::as_str) == Some(name)
                    && a.get("data-index") == Some(&index.to_string())
            };
            let bar = (bars.iter().find(wanted))
                .unwrap_or_else(|| panic!("batch {index} of {name} is on the timeline"));
            let e = &batch["estimate"];
            let to = instant(e["endsAt"].as_str().unwrap());
            let from = to - e["seconds"].as_i64().unwrap();
            let p90 = from
                + e["p90Seconds"]
                    .as_i64()
                    .unwrap()
                    .max(e["seconds"].as_i64().unwrap());
            assert_eq!(bar["data-to"], to.to_string(), "{name} {index}: {bar:?}");
            assert_eq!(
                bar["data-from"],
                from.to_string(),
                "{name} {index}: {bar:?}"
            );
            assert_eq!(
                bar["data-to-p90"],
                p90.to_string(),
                "{name} {index}: {bar:?}"
            );
            assert_eq!(
                bar["data-drain"],
                drain_word(&batch["forecast"]),
                "{name} {index}"
            );
            assert!(
                rows.iter().any(|r| wanted(&r)),
                "batch {index} of {name} is in the table"
            );
        }
    }
    assert_eq!(bars.len(), batches, "one bar per batch of the plan");
    assert_eq!(rows.len(), batches, "one table row per batch of the plan");
}

/// The word the plan's table gives a batch's drain, from its JSON forecast.
fn drain_word(forecast: &Value) -> &'static str {
    let some = |key: &str| forecast[key].as_array().is_some_and(|a| !a.is_empty());
    if some("blocks") {
        "blocks"
    } else if some("doNotDisrupt") || some("waitForCompletion") {
        "holds"
    } else if some("waits") {
        "waits"
    } else if some("pending") {
        "pending"
    } else {
        "ok"
    }
}

fn instant(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>().unwrap().as_second()
}

/// Reads a screenshot: its size, and that it shows something (many pixels neither white nor
/// one flat colour).
pub fn assert_screenshot_shows_something(file: &Path, width: u32, height: u32) {
    let decoder = png::Decoder::new(BufReader::new(std::fs::File::open(file).unwrap()));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a size")];
    let frame = reader.next_frame(&mut pixels).expect("its pixels");
    assert_eq!((frame.width, frame.height), (width, height));
    let channels = frame.color_type.samples();
    let pixels = &pixels[..frame.buffer_size()];
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0usize;
    for px in pixels.chunks(channels) {
        if px[..3].iter().any(|c| *c < 200) {
            inked += 1;
        }
        colours.insert(px[..3].to_vec());
    }
    let total = (width * height) as usize;
    assert!(
        inked * 50 > total,
        "{inked} of {total} pixels drawn: blank?"
    );
    assert!(colours.len() > 16, "{} colours: blank?", colours.len());
}

/// Keeps a copy of a screenshot for the docs when `ROLLOUT_EXT_PICTURES` names a directory
/// (`make pictures`).
pub fn keep_for_docs(file: &Path, name: &str) {
    if let Ok(dir) = std::env::var("ROLLOUT_EXT_PICTURES") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(file, Path::new(&dir).join(name)).unwrap();
    }
}

/// The batch bars of an `-o svg` picture (its `<g class="batch">` elements' attributes), after
/// checking it is well-formed XML.
pub fn svg_bars(svg: &str) -> Vec<BTreeMap<String, String>> {
    let doc = roxmltree::Document::parse(svg).expect("-o svg is well-formed XML");
    (doc.descendants())
        .filter(|n| n.has_tag_name("g"))
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|w| w == "batch"))
        })
        .map(|n| {
            (n.attributes())
                .map(|a| (a.name().to_string(), a.value().to_string()))
                .collect()
        })
        .collect()
}
