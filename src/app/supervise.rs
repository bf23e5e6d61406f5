//! The tasks `run` starts (the controller, the HTTP server, the mirror, the
//! CSR signer, the simulated fleet) and their supervision: the first to fail or stop on its
//! own ends the run, with the reason.

use crate::controller::ControllerError;

/// The tasks `run` supervises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Task {
    Controller,
    Server,
    Mirror,
    Retention,
    TransitionHook,
    LivenessStamp,
    Backups,
    CsrSigning,
}

impl Task {
    pub(super) fn name(self) -> &'static str {
        match self {
            Task::Controller => "controller",
            Task::Server => "HTTP server",
            Task::Mirror => "mirror",
            Task::Retention => "history retention",
            Task::TransitionHook => "transition hook",
            Task::LivenessStamp => "liveness stamp",
            Task::Backups => "scheduled backups",
            Task::CsrSigning => "certificate signing",
        }
    }

    /// Its `/livez` check.
    pub(super) fn check(self) -> &'static str {
        match self {
            Task::Controller => "controller",
            Task::Server => "server",
            Task::Mirror => "mirror",
            Task::Retention => "retention",
            Task::TransitionHook => "transition-hook",
            Task::LivenessStamp => "liveness-stamp",
            Task::Backups => "backups",
            Task::CsrSigning => "csr-signing",
        }
    }
}

/// How a supervised task ended.
pub(super) enum TaskResult {
    Controller(Result<(), ControllerError>),
    Done,
    Failed(String),
    Panicked(String),
}

/// What a supervised task returns.
pub(super) trait IntoTaskResult: Send + 'static {
    fn into_result(self) -> TaskResult;
}

impl IntoTaskResult for Result<(), ControllerError> {
    fn into_result(self) -> TaskResult {
        TaskResult::Controller(self)
    }
}

impl IntoTaskResult for Result<(), String> {
    fn into_result(self) -> TaskResult {
        match self {
            Ok(()) => TaskResult::Done,
            Err(e) => TaskResult::Failed(e),
        }
    }
}

/// The supervised tasks, each with its `/livez` check.
#[derive(Default)]
pub(super) struct Supervised {
    tasks: tokio::task::JoinSet<(Task, TaskResult)>,
    /// Tasks spawned and not yet reported.
    running: Vec<Task>,
    /// Tasks that ended already, and how.
    ended: Vec<(Task, TaskResult)>,
}

impl Supervised {
    pub(super) fn spawn<R: IntoTaskResult>(
        &mut self,
        task: Task,
        health: &crate::readiness::Health,
        future: impl std::future::Future<Output = R> + Send + 'static,
    ) {
        self.spawn_on(None, task, health, future)
    }

    /// [`Supervised::spawn`] on `runtime` (the current one if `None`).
    pub(super) fn spawn_on<R: IntoTaskResult>(
        &mut self,
        runtime: Option<&tokio::runtime::Handle>,
        task: Task,
        health: &crate::readiness::Health,
        future: impl std::future::Future<Output = R> + Send + 'static,
    ) {
        let running = health.live.register(task.check());
        self.running.push(task);
        let future = async move {
            #[cfg(debug_assertions)]
            panic_if_asked(task).await;
            future.await
        };
        let inner = match runtime {
            Some(runtime) => runtime.spawn(future),
            None => tokio::spawn(future),
        };
        self.tasks.spawn(async move {
            let result = match inner.await {
                Ok(result) => result.into_result(),
                Err(e) if e.is_panic() => TaskResult::Panicked(panic_message(e.into_panic())),
                Err(e) => TaskResult::Failed(e.to_string()),
            };
            running.fail(format!("the {} task has ended", task.name()));
            (task, result)
        });
    }

    /// The first task to end.
    pub(super) async fn next_end(&mut self) -> (Task, TaskResult) {
        match self.tasks.join_next().await {
            Some(Ok(ended)) => {
                self.running.retain(|t| *t != ended.0);
                ended
            }
            // The wrapper neither panics nor is aborted; nothing runs at all otherwise.
            _ => std::future::pending().await,
        }
    }

    /// Waits for `task` to end; `None` if it is not supervised or already reported.
    pub(super) async fn wait(&mut self, task: Task) -> Option<TaskResult> {
        if !self.running.contains(&task) {
            return None;
        }
        loop {
            if let Some(at) = self.ended.iter().position(|(t, _)| *t == task) {
                self.running.retain(|t| *t != task);
                return Some(self.ended.swap_remove(at).1);
            }
            match self.tasks.join_next().await? {
                Ok(ended) => self.ended.push(ended),
                Err(_) => return None,
            }
        }
    }
}

/// Debug builds only, for the tests of supervision: the task named by
/// `NODEKEEPER_TEST_PANIC_TASK` (as in `/livez`) panics once the controller
/// has served for a moment.
#[cfg(debug_assertions)]
async fn panic_if_asked(task: Task) {
    if std::env::var("NODEKEEPER_TEST_PANIC_TASK").as_deref() == Ok(task.check()) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        panic!("NODEKEEPER_TEST_PANIC_TASK={} asked for it", task.check());
    }
}

/// The text a panic carried.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => format!("it panicked: {text}"),
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(text) => format!("it panicked: {text}"),
            Err(_) => "it panicked".into(),
        },
    }
}
