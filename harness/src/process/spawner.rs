//! The one thread every child of the lab is forked from ([`spawner`]), and the kernel's
//! parent-death signal every child gets ([`die_with_parent`]). The kernel sends that signal when
//! the *thread* that forked the child exits, so the fork must happen on a thread that lives as
//! long as the lab — this one, never joined — whichever thread or runtime asked for the child.
//! It builds no command (that is [`super::Spawn`]) and keeps no child (that is
//! [`super::ChildProcess`]): it forks what it is handed and hands back what it got.

use std::io;
use std::os::unix::process::CommandExt;
use std::sync::{mpsc, Mutex, OnceLock};

use nix::sys::signal::Signal;
use tokio::process::Child;

/// Arranges for the child to receive `signal` when the spawning thread dies (Linux's
/// parent-death signal), and to exit at once if the lab already died while it was being spawned.
pub(super) fn die_with_parent(cmd: &mut std::process::Command, signal: Signal) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(io::Error::from)?;
            if nix::unistd::getppid() != parent {
                // The lab died while this child was being spawned: do not outlive it.
                return Err(io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}

pub(super) enum Spawned {
    Tokio(Child),
    Std(std::process::Child),
}

struct Job {
    cmd: std::process::Command,
    runtime: Option<tokio::runtime::Handle>,
    reply: mpsc::SyncSender<io::Result<Spawned>>,
}

/// The thread every child is forked from. It lives as long as the lab process (it is never
/// joined and never returns), so the parent-death signal fires when the lab dies — not when
/// some short-lived thread that happened to start the child does.
pub(super) struct Spawner(Mutex<mpsc::Sender<Job>>);

pub(super) fn spawner() -> &'static Spawner {
    static SPAWNER: OnceLock<Spawner> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("lab-spawner".into())
            .spawn(move || {
                for job in rx {
                    let spawned = match job.runtime {
                        Some(rt) => {
                            let _entered = rt.enter();
                            let mut cmd = tokio::process::Command::from(job.cmd);
                            cmd.kill_on_drop(true).spawn().map(Spawned::Tokio)
                        }
                        None => {
                            let mut cmd = job.cmd;
                            cmd.spawn().map(Spawned::Std)
                        }
                    };
                    let _ = job.reply.send(spawned);
                }
            })
            .expect("failed to start the lab's spawner thread");
        Spawner(Mutex::new(tx))
    })
}

impl Spawner {
    pub(super) fn run(
        &self,
        cmd: std::process::Command,
        runtime: Option<tokio::runtime::Handle>,
    ) -> io::Result<Spawned> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job = Job {
            cmd,
            runtime,
            reply,
        };
        self.0
            .lock()
            .map_err(|_| io::Error::other("the spawner's lock is poisoned"))?
            .send(job)
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        answer
            .recv()
            .map_err(|_| io::Error::other("the spawner thread is gone"))?
    }
}
