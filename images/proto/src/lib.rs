//! The wire protocol between the vmbench host harness and its guest agent.
//!
//! One frame is one JSON object on one line (`\n`-terminated), at most [`MAX_FRAME`] bytes
//! including the newline. Both directions use the same framing. The host treats everything the
//! guest sends as untrusted: [`LineDecoder`] never buffers more than one frame, and any frame that
//! is oversized, not UTF-8 or not a known message is an error for the cell, never a panic.
//!
//! Large payloads (fio's JSON, per-second logs, bonnie++'s CSV) travel as [`GuestMsg::Blob`]
//! chunks of at most [`BLOB_CHUNK`] bytes of text, so no single frame grows with the payload.

use serde::{Deserialize, Serialize};

/// Bumped on every incompatible change; the host refuses a guest that says another version.
pub const PROTOCOL_VERSION: u32 = 1;
/// The virtio-serial (or Xen PV console) port name the agent looks for.
pub const PORT_NAME: &str = "org.vmbench.0";
/// Largest frame either side accepts, newline included.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest blob chunk, in bytes of UTF-8 text before JSON escaping. JSON escaping can grow text
/// at most sixfold (`\u0001`), so a chunk always fits in [`MAX_FRAME`].
pub const BLOB_CHUNK: usize = 128 * 1024;
/// The serial number the host gives the disk under test; the agent finds the device by it.
pub const TEST_DISK_SERIAL: &str = "vmbench-test";
/// The guest-side path the disk under test is mounted on when a filesystem layout is used.
pub const TEST_MOUNTPOINT: &str = "/mnt/test";
/// The virtio-fs tag of the host directory under test (`hostdir` backend).
pub const TEST_FS_TAG: &str = "vmbench-test";

/// Messages from the guest agent to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum GuestMsg {
    /// First message after boot: who the guest is and what it can run.
    Hello(Hello),
    /// Sent every second while the agent is alive, so the host can tell a stalled guest.
    Heartbeat {
        /// The job being run, if any.
        job: Option<u64>,
        /// Guest uptime in milliseconds.
        uptime_ms: u64,
    },
    /// One status line of the running engine (fio's eta line), for live progress.
    Status {
        /// The job this line belongs to.
        job: u64,
        /// Index of the step within the job.
        step: u32,
        /// The line as the engine printed it.
        line: String,
    },
    /// One chunk of an artifact of a step (engine output, logs).
    Blob {
        /// The job this artifact belongs to.
        job: u64,
        /// Artifact name, a plain file name (no `/`).
        name: String,
        /// Chunk index, from 0, without gaps.
        seq: u32,
        /// True on the final chunk of this artifact.
        last: bool,
        /// The chunk's text.
        data: String,
    },
    /// A step finished (successfully or not).
    StepDone {
        /// The job.
        job: u64,
        /// Index of the step within the job.
        step: u32,
        /// The engine's exit code (`-1` when it was killed by a signal or could not start).
        exit_code: i32,
        /// The last lines of the engine's stderr, for the failure reason.
        stderr_tail: String,
        /// Wall time of the step inside the guest.
        duration_ms: u64,
    },
    /// The whole job finished; `ok` is false when a step failed and the rest were skipped.
    JobDone {
        /// The job.
        job: u64,
        /// True when every step exited 0.
        ok: bool,
    },
    /// The agent could not do what was asked (bad device, unknown job); text for the reason.
    Error {
        /// The job, when the error belongs to one.
        job: Option<u64>,
        /// What went wrong, in the agent's words.
        message: String,
    },
}

/// What the guest says about itself at boot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Must equal [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The agent crate's version.
    pub agent_version: String,
    /// `uname -r` of the guest kernel.
    pub kernel: String,
    /// `fio --version`, when fio is in the image.
    pub fio_version: Option<String>,
    /// bonnie++'s version, when it is in the image.
    pub bonnie_version: Option<String>,
    /// Online CPUs.
    pub cpus: u32,
    /// MemTotal in KiB.
    pub mem_kib: u64,
    /// Block devices the guest sees (not partitions).
    pub block_devices: Vec<BlockDevice>,
    /// Milliseconds from kernel start to this hello (guest uptime).
    pub uptime_ms: u64,
}

/// A block device as the guest sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockDevice {
    /// Kernel name (`vda`, `sda`, `xvda`).
    pub name: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// The serial the host set, when the bus exposes one.
    pub serial: Option<String>,
}

/// Messages from the host to the guest agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum HostMsg {
    /// Run these steps in order, stop at the first failure.
    Job(Job),
    /// Sync and power the guest off.
    PowerOff,
}

/// A unit of work for the guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Chosen by the host; echoed in every reply.
    pub id: u64,
    /// Serial of the disk under test (see [`TEST_DISK_SERIAL`]).
    pub disk_serial: String,
    /// Steps, run in order.
    pub steps: Vec<Step>,
}

/// One thing the agent does. Arguments may contain the placeholders `{disk}` (the disk under
/// test's device path) and `{dir}` (the test mountpoint); the agent substitutes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// `sync; echo 3 > /proc/sys/vm/drop_caches`.
    DropCaches,
    /// Make a filesystem on the disk under test (or on a volume made on it first) and mount it
    /// on [`TEST_MOUNTPOINT`].
    Mkfs {
        /// Which filesystem.
        fs: Filesystem,
        /// What the filesystem goes on; absent (older hosts) means the whole disk.
        #[serde(default, skip_serializing_if = "Volume::is_whole")]
        volume: Volume,
    },
    /// Run fio on a job file; ship the named outputs back as blobs.
    Fio {
        /// Job file text (placeholders substituted by the agent).
        job_text: String,
        /// Extra command-line arguments, after the fixed ones.
        args: Vec<String>,
        /// Artifact name for fio's JSON output.
        output_name: String,
        /// Ship back files in the working directory whose names start with this prefix
        /// (per-second logs), when set.
        log_prefix: Option<String>,
    },
    /// Run bonnie++ with these arguments; its stdout (text table + CSV) is shipped back.
    Bonnie {
        /// Arguments (placeholders substituted).
        args: Vec<String>,
        /// Artifact name for bonnie++'s stdout.
        output_name: String,
    },
    /// Mount the host directory shared with virtio-fs under `tag` on [`TEST_MOUNTPOINT`]
    /// (the `hostdir` backend: there is no disk under test, the filesystem is the host's).
    MountVirtiofs {
        /// The virtio-fs tag (libvirt's `<target dir>`).
        tag: String,
    },
    /// Fault injection for tests: write this key to /proc/sysrq-trigger.
    Sysrq {
        /// The sysrq key, e.g. `c` for a crash.
        key: char,
    },
}

/// Filesystems the guest can make on the disk under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Filesystem {
    /// mke2fs -t ext4
    Ext4,
    /// mkfs.xfs
    Xfs,
}

/// What the guest puts between the disk under test and the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Volume {
    /// The whole disk.
    #[default]
    Whole,
    /// One primary partition spanning the disk (MBR written by the agent).
    Partition,
    /// An LVM logical volume over the whole disk (PV, VG, one LV; lvm2 in the guest).
    Lvm,
    /// Partition 1 of a disk split in two: an MBR with two primary partitions of equal size,
    /// partition 1 (Linux, 0x83) and partition 2 (Linux LVM, 0x8e) holding a PV, a VG and one
    /// LV over all of it. The filesystem is made on partition 1 and on the LV, and only
    /// partition 1's is mounted: the disk is laid out exactly as for [`Volume::SplitLvm`] (the
    /// same partitions, the same LVM objects, a filesystem on each side; an unmounted
    /// filesystem does no I/O), so the two measure the two sides of one layout.
    SplitPartition,
    /// The LV on partition 2 of the same split disk as [`Volume::SplitPartition`]: the same
    /// partitions, LVM objects and filesystems, and only the LV's filesystem mounted.
    SplitLvm,
}

impl Volume {
    /// Whether this is the default (kept off the wire for compatibility).
    pub fn is_whole(&self) -> bool {
        *self == Volume::Whole
    }

    /// Whether the guest runs lvm2 (and needs dm-mod) to lay this volume out; the host boots
    /// the initramfs that holds them when it does.
    pub fn uses_lvm(&self) -> bool {
        match self {
            Volume::Whole | Volume::Partition => false,
            Volume::Lvm | Volume::SplitPartition | Volume::SplitLvm => true,
        }
    }
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FrameError {
    /// The peer sent more than [`MAX_FRAME`] bytes without a newline.
    #[error("frame larger than {max} bytes")]
    Oversized {
        /// The limit.
        max: usize,
    },
    /// The frame was not UTF-8.
    #[error("frame is not UTF-8: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
    /// The frame was not a known message.
    #[error("invalid message: {0}")]
    Invalid(String),
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({0} bytes pending)")]
    Truncated(usize),
}

/// Serializes one message as a frame (JSON + `\n`). Fails only if the message itself would
/// exceed [`MAX_FRAME`].
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut v = serde_json::to_vec(msg).map_err(|e| FrameError::Invalid(e.to_string()))?;
    v.push(b'\n');
    if v.len() > MAX_FRAME {
        return Err(FrameError::Oversized { max: MAX_FRAME });
    }
    Ok(v)
}

/// Parses one frame (without its newline).
pub fn decode<T: for<'de> Deserialize<'de>>(frame: &[u8]) -> Result<T, FrameError> {
    let text = std::str::from_utf8(frame)?;
    serde_json::from_str(text).map_err(|e| FrameError::Invalid(e.to_string()))
}

/// Splits a byte stream into frames without ever holding more than one frame's worth of bytes.
///
/// Sans-I/O: feed it what the transport read, take frames out. After an oversized frame the
/// decoder is poisoned (the stream's framing can no longer be trusted).
#[derive(Debug, Default)]
pub struct LineDecoder {
    buf: Vec<u8>,
    poisoned: bool,
}

impl LineDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes and returns the complete frames they finish, in order. A frame is returned
    /// without its newline. Empty lines are skipped (a guest console may emit them).
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<Vec<u8>>, FrameError> {
        if self.poisoned {
            return Err(FrameError::Oversized { max: MAX_FRAME });
        }
        let mut out = Vec::new();
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = bytes.split_at(pos);
            self.append(head)?;
            let frame = std::mem::take(&mut self.buf);
            if !frame.is_empty() {
                out.push(frame);
            }
            bytes = &rest[1..];
        }
        self.append(bytes)?;
        Ok(out)
    }

    /// Call at end of stream: an unterminated frame is an error.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated(self.buf.len()))
        }
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), FrameError> {
        // +1: the newline still to come counts toward the frame.
        if self.buf.len() + bytes.len() + 1 > MAX_FRAME {
            self.poisoned = true;
            self.buf = Vec::new();
            return Err(FrameError::Oversized { max: MAX_FRAME });
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }
}

/// Splits text into chunks of at most [`BLOB_CHUNK`] bytes on UTF-8 boundaries.
pub fn chunk_text(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > BLOB_CHUNK {
        let mut cut = BLOB_CHUNK;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (a, b) = rest.split_at(cut);
        out.push(a);
        rest = b;
    }
    out.push(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> GuestMsg {
        GuestMsg::Hello(Hello {
            protocol: PROTOCOL_VERSION,
            agent_version: "0.1.0".into(),
            kernel: "6.1.0-28-amd64".into(),
            fio_version: Some("fio-3.33".into()),
            bonnie_version: None,
            cpus: 2,
            mem_kib: 1_000_000,
            block_devices: vec![BlockDevice {
                name: "vda".into(),
                size_bytes: 1 << 30,
                serial: Some(TEST_DISK_SERIAL.into()),
            }],
            uptime_ms: 3000,
        })
    }

    #[test]
    fn round_trip_through_decoder_in_small_pieces() {
        let a = encode(&hello()).unwrap();
        let b = encode(&GuestMsg::Heartbeat {
            job: Some(7),
            uptime_ms: 5,
        })
        .unwrap();
        let stream = [a, b].concat();
        let mut d = LineDecoder::new();
        let mut frames = Vec::new();
        for piece in stream.chunks(3) {
            frames.extend(d.push(piece).unwrap());
        }
        d.finish().unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(decode::<GuestMsg>(&frames[0]).unwrap(), hello());
        assert_eq!(
            decode::<GuestMsg>(&frames[1]).unwrap(),
            GuestMsg::Heartbeat {
                job: Some(7),
                uptime_ms: 5
            }
        );
    }

    #[test]
    fn oversized_frame_is_refused_without_buffering_it() {
        let mut d = LineDecoder::new();
        let big = vec![b'x'; MAX_FRAME / 2];
        assert!(d.push(&big).is_ok());
        assert_eq!(d.push(&big), Err(FrameError::Oversized { max: MAX_FRAME }));
        assert!(
            d.buf.capacity() < MAX_FRAME,
            "decoder kept the oversized bytes"
        );
        // Poisoned: even a valid frame afterwards is refused.
        assert!(d.push(b"{}\n").is_err());
    }

    #[test]
    fn frame_of_exactly_max_size_is_accepted() {
        let mut d = LineDecoder::new();
        let mut f = vec![b'a'; MAX_FRAME - 1];
        f.push(b'\n');
        assert_eq!(d.push(&f).unwrap().len(), 1);
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let mut d = LineDecoder::new();
        assert!(d.push(b"{\"type\":\"heart").unwrap().is_empty());
        assert_eq!(d.finish(), Err(FrameError::Truncated(14)));
    }

    #[test]
    fn non_utf8_and_unknown_messages_are_errors() {
        assert!(matches!(
            decode::<GuestMsg>(&[0xff, 0xfe]),
            Err(FrameError::NotUtf8(_))
        ));
        assert!(matches!(
            decode::<GuestMsg>(br#"{"type":"launch_missiles"}"#),
            Err(FrameError::Invalid(_))
        ));
        assert!(matches!(
            decode::<GuestMsg>(br#"{"type":"heartbeat","job":null,"uptime_ms":1,"extra":1}"#),
            Err(FrameError::Invalid(_))
        ));
    }

    #[test]
    fn chunks_respect_limit_and_char_boundaries() {
        let text = "é".repeat(BLOB_CHUNK); // 2 bytes each
        let chunks = chunk_text(&text);
        assert!(chunks.iter().all(|c| c.len() <= BLOB_CHUNK));
        assert_eq!(chunks.concat(), text);
        // The worst case for escaping still fits in one frame.
        let worst = "\u{1}".repeat(BLOB_CHUNK);
        let msg = GuestMsg::Blob {
            job: 1,
            name: "x".into(),
            seq: 0,
            last: true,
            data: worst,
        };
        assert!(encode(&msg).is_ok());
    }

    #[test]
    fn host_messages_round_trip() {
        let job = HostMsg::Job(Job {
            id: 1,
            disk_serial: TEST_DISK_SERIAL.into(),
            steps: vec![
                Step::DropCaches,
                Step::Mkfs {
                    fs: Filesystem::Ext4,
                    volume: Volume::Whole,
                },
                Step::Mkfs {
                    fs: Filesystem::Ext4,
                    volume: Volume::Partition,
                },
                Step::Fio {
                    job_text: "[x]\nfilename={disk}\n".into(),
                    args: vec![],
                    output_name: "fio.json".into(),
                    log_prefix: Some("pg".into()),
                },
            ],
        });
        let f = encode(&job).unwrap();
        assert_eq!(decode::<HostMsg>(&f[..f.len() - 1]).unwrap(), job);
    }

    #[test]
    fn mkfs_without_volume_is_the_whole_disk_both_ways() {
        // What hosts before the volume field sent, and what they still receive for `ext4`.
        let old = r#"{"step":"mkfs","fs":"ext4"}"#;
        let step: Step = serde_json::from_str(old).unwrap();
        assert_eq!(
            step,
            Step::Mkfs {
                fs: Filesystem::Ext4,
                volume: Volume::Whole
            }
        );
        assert_eq!(serde_json::to_string(&step).unwrap(), old);
        let lvm: Step =
            serde_json::from_str(r#"{"step":"mkfs","fs":"ext4","volume":"lvm"}"#).unwrap();
        assert!(matches!(
            lvm,
            Step::Mkfs {
                volume: Volume::Lvm,
                ..
            }
        ));
    }

    #[test]
    fn split_volumes_are_snake_case_on_the_wire() {
        for (volume, name) in [
            (Volume::SplitPartition, "split_partition"),
            (Volume::SplitLvm, "split_lvm"),
        ] {
            let step = Step::Mkfs {
                fs: Filesystem::Ext4,
                volume,
            };
            let text = format!(r#"{{"step":"mkfs","fs":"ext4","volume":"{name}"}}"#);
            assert_eq!(serde_json::to_string(&step).unwrap(), text);
            assert_eq!(serde_json::from_str::<Step>(&text).unwrap(), step);
            assert!(volume.uses_lvm(), "{name}");
        }
        assert!(Volume::Lvm.uses_lvm());
        assert!(!Volume::Whole.uses_lvm() && !Volume::Partition.uses_lvm());
    }
}
