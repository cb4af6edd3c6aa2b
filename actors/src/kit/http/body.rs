//! A request's body: bytes held whole (every API call), or a file streamed from disk between
//! a head and a tail (an upload's form), read a chunk at a time so a 50 MB file never sits
//! in memory whole.

use std::path::PathBuf;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;

/// What hyper sends.
pub type Body = Either<Full<Bytes>, StreamBody<Frames>>;

/// An upload's chunks, in order.
pub type Frames = Pin<Box<dyn Stream<Item = Result<Frame<Bytes>, std::io::Error>> + Send>>;

/// How much of the file is read at once.
const CHUNK: usize = 64 * 1024;

/// A file sent as the middle of a body: `head`, the file's `size` bytes, `tail`.
#[derive(Debug, Clone)]
pub struct Upload {
    pub head: Bytes,
    pub path: PathBuf,
    pub size: u64,
    pub tail: Bytes,
}

impl Upload {
    /// The body's length: it is sent with `Content-Length`.
    pub fn length(&self) -> u64 {
        self.head.len() as u64 + self.size + self.tail.len() as u64
    }

    /// The body, the file opened afresh (a redirect sends it again from its start). A file
    /// that is shorter or longer than `size` by the time it is read fails the request rather
    /// than send a body of another length.
    pub fn body(&self) -> Body {
        let upload = self.clone();
        let frames = futures_util::stream::unfold(Step::Head(upload), next);
        Either::Right(StreamBody::new(Box::pin(frames)))
    }
}

/// Where the stream is.
enum Step {
    Head(Upload),
    File {
        file: tokio::fs::File,
        left: u64,
        tail: Bytes,
    },
    Done,
}

async fn next(step: Step) -> Option<(Result<Frame<Bytes>, std::io::Error>, Step)> {
    use tokio::io::AsyncReadExt;
    match step {
        Step::Head(upload) => match tokio::fs::File::open(&upload.path).await {
            Ok(file) => {
                let left = upload.size;
                let then = Step::File {
                    file,
                    left,
                    tail: upload.tail,
                };
                Some((Ok(Frame::data(upload.head)), then))
            }
            Err(e) => Some((Err(e), Step::Done)),
        },
        Step::File { left: 0, tail, .. } => Some((Ok(Frame::data(tail)), Step::Done)),
        Step::File {
            mut file,
            left,
            tail,
        } => {
            let mut chunk = vec![0u8; CHUNK.min(left as usize)];
            match file.read(&mut chunk).await {
                Ok(0) => Some((Err(changed()), Step::Done)),
                Ok(n) => {
                    chunk.truncate(n);
                    let left = left - n as u64;
                    Some((
                        Ok(Frame::data(chunk.into())),
                        Step::File { file, left, tail },
                    ))
                }
                Err(e) => Some((Err(e), Step::Done)),
            }
        }
        Step::Done => None,
    }
}

fn changed() -> std::io::Error {
    std::io::Error::other("the file got shorter while it was sent")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[actix_rt::test]
    async fn an_upload_is_its_head_the_whole_file_and_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let upload = Upload {
            head: Bytes::from_static(b"<head>"),
            path: path.clone(),
            size: data.len() as u64,
            tail: Bytes::from_static(b"<tail>"),
        };
        let sent = upload.body().collect().await.unwrap().to_bytes();
        assert_eq!(sent.len() as u64, upload.length());
        assert_eq!(&sent[..6], b"<head>");
        assert_eq!(&sent[6..6 + data.len()], &data[..]);
        assert_eq!(&sent[6 + data.len()..], b"<tail>");

        std::fs::write(&path, &data[..1000]).unwrap();
        assert!(
            upload.body().collect().await.is_err(),
            "a file cut short fails the body"
        );
    }
}
