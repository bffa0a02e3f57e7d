//! What a handler asks of the runner of its request, through its [`Context`](crate::Context).
//!
//! It sits below both the context (which sends commands) and the runner (which applies them),
//! so neither imports the other for it.

use std::sync::{Arc, Mutex, OnceLock};

use modelctx_session::LogLevel;
use modelctx_types::{ErrorObject, JsonObject, RequestId};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::input::InputError;

/// What handlers ask of the runner. Each names its request by id and generation (the session's
/// `IncomingRequest::generation`): a cancelled request's handler runs on until it notices, and
/// what it asks after a new request reused its id is for a request that is gone, never for the
/// new one (finding 12).
#[derive(Debug)]
pub(crate) enum Command {
    /// A handler finished: its result written as JSON text (on the handler's side, so that the
    /// runner only passes it on).
    Respond {
        id: RequestId,
        generation: u64,
        answer: Result<Box<RawValue>, ErrorObject>,
    },
    /// Progress on a request.
    Progress {
        id: RequestId,
        generation: u64,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A question for the client (legacy), asked for request `id`.
    Ask {
        id: RequestId,
        generation: u64,
        method: String,
        params: JsonObject,
        reply: oneshot::Sender<Result<Value, InputError>>,
    },
    /// Close the connection of a request's stream (legacy HTTP), telling whether it was.
    CloseStream {
        id: RequestId,
        generation: u64,
        reply: oneshot::Sender<bool>,
    },
    /// A task's status, for the connection (not for a request): `legacy`, the 2025-11-25
    /// `notifications/tasks/status` with the task as `params`; else the extension's
    /// `notifications/tasks` with the task's `DetailedTask` as `params`, on the listen streams
    /// that name it (`crate::tasks::runner::Tasks::publish`).
    TaskStatus { legacy: bool, params: JsonObject },
    /// A log message about a request.
    Log {
        id: RequestId,
        generation: u64,
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
}

/// The handlers' end of a runner's command channel, made when a handler first sends a command:
/// most requests end without one (a handler that answers at once sends none), and cost no
/// channel then. Cloned into each handler's [`Context`](crate::Context).
///
/// The channel is bounded (the runner's `bound`): a handler that sends faster than the runner
/// applies waits in [`send`](Commands::send) until there is room, and nothing sent is dropped.
/// Once the runner is gone ([`CommandQueue`] dropped), every send fails with the command given
/// back.
#[derive(Clone)]
pub(crate) struct Commands {
    slot: Arc<Slot>,
}

/// What the two ends share.
struct Slot {
    bound: usize,
    /// The sending end, once made.
    tx: OnceLock<mpsc::Sender<Command>>,
    /// The receiving end, between its making and the runner taking it.
    rx: Mutex<Receiving>,
    /// Tells the runner that the channel was made.
    made: Notify,
}

enum Receiving {
    /// No channel yet.
    NotMade,
    /// Made; the runner has not taken the receiver yet.
    Made(mpsc::Receiver<Command>),
    /// The runner has it.
    Taken,
    /// The runner is gone: no channel is made any more.
    Closed,
}

/// The runner's end of the command channel ([`Commands`]).
pub(crate) struct CommandQueue {
    slot: Arc<Slot>,
    rx: Option<mpsc::Receiver<Command>>,
}

/// A new command channel of `bound` places (at least one), made on the first send.
pub(crate) fn commands(bound: usize) -> (Commands, CommandQueue) {
    let slot = Arc::new(Slot {
        bound: bound.max(1),
        tx: OnceLock::new(),
        rx: Mutex::new(Receiving::NotMade),
        made: Notify::new(),
    });
    let queue = CommandQueue {
        slot: slot.clone(),
        rx: None,
    };
    (Commands { slot }, queue)
}

impl Commands {
    /// The sender, made now if it was not yet; `None` once the runner is gone.
    fn sender(&self) -> Option<&mpsc::Sender<Command>> {
        if let Some(tx) = self.slot.tx.get() {
            return Some(tx);
        }
        let mut rx = self.slot.rx.lock().unwrap_or_else(|e| e.into_inner());
        match &*rx {
            Receiving::Closed => None,
            // Made meanwhile by another handler (the lock orders the two).
            Receiving::Made(_) | Receiving::Taken => self.slot.tx.get(),
            Receiving::NotMade => {
                let (tx, made) = mpsc::channel(self.slot.bound);
                *rx = Receiving::Made(made);
                let tx = self.slot.tx.get_or_init(|| tx);
                drop(rx);
                self.slot.made.notify_one();
                Some(tx)
            }
        }
    }

    /// Sends `command`, waiting while the channel is full; the command back when the runner
    /// is gone.
    pub(crate) async fn send(&self, command: Command) -> Result<(), Command> {
        match self.sender() {
            Some(tx) => tx.send(command).await.map_err(|e| e.0),
            None => Err(command),
        }
    }

    /// Sends `command` if there is room now.
    pub(crate) fn try_send(&self, command: Command) -> Result<(), TrySendError<Command>> {
        match self.sender() {
            Some(tx) => tx.try_send(command),
            None => Err(TrySendError::Closed(command)),
        }
    }

    /// Whether no command waits to be applied (none was ever sent, or the runner took all).
    pub(crate) fn is_quiet(&self) -> bool {
        self.slot
            .tx
            .get()
            .is_none_or(|tx| tx.capacity() == tx.max_capacity())
    }
}

impl CommandQueue {
    /// The receiver, once a handler made the channel.
    fn receiver(&mut self) -> Option<&mut mpsc::Receiver<Command>> {
        if self.rx.is_none() {
            let mut rx = self.slot.rx.lock().unwrap_or_else(|e| e.into_inner());
            if let Receiving::Made(_) = &*rx
                && let Receiving::Made(made) = std::mem::replace(&mut *rx, Receiving::Taken)
            {
                self.rx = Some(made);
            }
        }
        self.rx.as_mut()
    }

    /// The next command; waits for a handler to make the channel first. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Option<Command> {
        loop {
            if let Some(rx) = self.receiver() {
                return rx.recv().await;
            }
            // A channel made between the look above and this wait left a permit: no wake-up
            // is missed.
            self.slot.made.notified().await;
        }
    }

    /// A command queued already, if any.
    #[cfg(any(feature = "http", test))]
    pub(crate) fn try_recv(&mut self) -> Option<Command> {
        self.receiver()?.try_recv().ok()
    }

    /// Whether the channel was made (a handler sent a command).
    #[cfg(test)]
    pub(crate) fn is_made(&self) -> bool {
        self.slot.tx.get().is_some()
    }
}

impl Drop for CommandQueue {
    fn drop(&mut self) {
        // No channel is made any more, and one made but not taken goes: senders fail.
        let mut rx = self.slot.rx.lock().unwrap_or_else(|e| e.into_inner());
        *rx = Receiving::Closed;
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn log(n: usize) -> Command {
        Command::Log {
            id: RequestId::Number(1),
            generation: 0,
            level: LogLevel::Info,
            logger: None,
            data: Value::from(n),
        }
    }

    fn number(command: Command) -> u64 {
        match command {
            Command::Log { data, .. } => data.as_u64().expect("a number"),
            other => panic!("not a log: {other:?}"),
        }
    }

    #[test]
    fn no_channel_is_made_until_a_handler_sends() {
        let (tx, mut queue) = commands(4);
        let handler = tx.clone();
        assert!(!queue.is_made());
        assert!(handler.is_quiet());
        assert!(queue.try_recv().is_none());
        assert!(!queue.is_made(), "looking does not make it");
        assert!(handler.try_send(log(1)).is_ok());
        assert!(queue.is_made());
        assert!(!handler.is_quiet());
        assert_eq!(queue.try_recv().map(number), Some(1));
        assert!(handler.is_quiet());
    }

    #[test]
    fn a_handler_sending_past_the_bound_waits_and_loses_nothing() {
        let (tx, mut queue) = commands(2);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(tx.try_send(log(0)).is_ok());
        assert!(tx.try_send(log(1)).is_ok());
        assert!(matches!(tx.try_send(log(2)), Err(TrySendError::Full(_))));
        let mut third = Box::pin(tx.send(log(2)));
        assert!(third.as_mut().poll(&mut cx).is_pending(), "back-pressured");
        assert_eq!(queue.try_recv().map(number), Some(0));
        assert!(matches!(third.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        assert_eq!(queue.try_recv().map(number), Some(1));
        assert_eq!(queue.try_recv().map(number), Some(2));
        assert!(queue.try_recv().is_none());
    }

    #[tokio::test]
    async fn the_runner_waiting_hears_of_the_first_command() {
        let (tx, mut queue) = commands(1);
        let waiting = tokio::spawn(async move { queue.recv().await.map(number) });
        tokio::task::yield_now().await;
        assert!(tx.send(log(7)).await.is_ok());
        assert_eq!(waiting.await.ok().flatten(), Some(7));
    }

    #[test]
    fn sends_fail_once_the_runner_is_gone() {
        let (tx, queue) = commands(4);
        drop(queue);
        // Not made after the runner went: the command comes back, nothing waits for room.
        assert!(matches!(tx.try_send(log(1)), Err(TrySendError::Closed(_))));
        let (tx, mut queue) = commands(4);
        assert!(tx.try_send(log(1)).is_ok());
        assert!(queue.try_recv().is_some());
        drop(queue);
        assert!(matches!(tx.try_send(log(2)), Err(TrySendError::Closed(_))));
        let mut cx = Context::from_waker(Waker::noop());
        let mut sent = Box::pin(tx.send(log(3)));
        assert!(matches!(sent.as_mut().poll(&mut cx), Poll::Ready(Err(_))));
        // Made, never taken, then the runner went: the queued command is dropped with it, and
        // later sends fail.
        let (tx, queue) = commands(4);
        assert!(tx.try_send(log(1)).is_ok());
        drop(queue);
        assert!(matches!(tx.try_send(log(2)), Err(TrySendError::Closed(_))));
    }
}
