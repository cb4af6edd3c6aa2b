//! `multipart/form-data` bodies (RFC 7578), for the APIs that take a file with fields: a
//! transcription server, Telegram's `sendPhoto` and `sendDocument`.

use bytes::{BufMut, Bytes, BytesMut};

use super::Request;

/// The parts' separator: long and fixed, and never in a value relayq writes (a file's bytes
/// could hold it by chance once in 2^190 or so).
const BOUNDARY: &str = "relayq-form-7c1e9a4f3b2d8e6a0f5c4b3a2d1e9f8a7b6c5d4e";

/// A form being built, held whole (see [`Multipart::file`]).
#[derive(Default)]
pub struct Multipart {
    body: BytesMut,
}

impl Multipart {
    pub fn new() -> Self {
        Multipart::default()
    }

    /// A text field.
    pub fn text(mut self, name: &str, value: &str) -> Self {
        self.head(name, None, None);
        self.body.put_slice(value.as_bytes());
        self.body.put_slice(b"\r\n");
        self
    }

    /// A file field: `filename` (made safe for the header) of type `content_type`.
    pub fn file(mut self, name: &str, filename: &str, content_type: &str, bytes: Vec<u8>) -> Self {
        self.head(name, Some(filename), Some(content_type));
        self.body.put_slice(&bytes);
        self.body.put_slice(b"\r\n");
        self
    }

    fn head(&mut self, name: &str, filename: Option<&str>, content_type: Option<&str>) {
        self.body.put_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{}\"", quoted(name));
        if let Some(filename) = filename {
            disposition.push_str(&format!("; filename=\"{}\"", quoted(filename)));
        }
        self.body.put_slice(disposition.as_bytes());
        self.body.put_slice(b"\r\n");
        if let Some(content_type) = content_type {
            let kept: String = content_type.chars().filter(|c| !c.is_control()).collect();
            self.body
                .put_slice(format!("Content-Type: {kept}\r\n").as_bytes());
        }
        self.body.put_slice(b"\r\n");
    }

    /// The form with a file streamed from disk as its last field (`size` bytes at `path`), as
    /// `request`'s body: never read into memory whole.
    pub fn upload(
        mut self,
        request: Request,
        name: &str,
        filename: &str,
        content_type: &str,
        path: &std::path::Path,
        size: u64,
    ) -> Request {
        self.head(name, Some(filename), Some(content_type));
        let upload = super::Upload {
            head: self.body.freeze(),
            path: path.to_path_buf(),
            size,
            tail: Bytes::from(format!("\r\n--{BOUNDARY}--\r\n")),
        };
        request.upload(upload, content_type_header())
    }

    /// The form as `request`'s body, with its content type.
    pub fn send_with(mut self, request: Request) -> Request {
        self.body
            .put_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        let body: Bytes = self.body.freeze();
        request.body(body, content_type_header())
    }
}

/// `multipart/form-data` with the boundary.
fn content_type_header() -> &'static str {
    static TYPE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TYPE.get_or_init(|| format!("multipart/form-data; boundary={BOUNDARY}"))
}

/// A name inside a header's quotes: quotes, backslashes and line breaks cannot end it early.
fn quoted(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '"' | '\\' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_its_fields_and_file_between_boundaries_and_a_name_cannot_break_out() {
        let form = Multipart::new().text("model", "whisper-1").file(
            "file",
            "a\"b\r\nX-Evil: 1.ogg",
            "audio/ogg",
            b"OggS".to_vec(),
        );
        let text = String::from_utf8(form.body.to_vec()).unwrap();
        assert_eq!(
            text,
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n\
                 --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a_b__X-Evil: 1.ogg\"\r\n\
                 Content-Type: audio/ogg\r\n\r\nOggS\r\n"
            )
        );
        assert!(content_type_header().ends_with(BOUNDARY));
    }
}
