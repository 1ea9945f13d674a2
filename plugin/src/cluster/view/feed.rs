//! The watch tasks that keep a view's stores current.
//!
//! A kind watched whole runs kube's watcher (a paginated list, then a watch resumed from its
//! last version, a new list when the server no longer has that version). Bound pods have a
//! watch of their own, started from a version the server gives it, and each scope the run
//! looks at is listed when it comes into view; when that watch loses its place, it starts
//! again from a new version and every scope is listed again, so no change goes missing.
//!
//! A failure that is an answer (forbidden, not found) or that the client's retries gave up on
//! fails the view, and every read of it says why; a watch cut mid-stream is resumed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher;

use super::object::{Watched, version_of};
use super::store::{Entry, Key, Scope, Whole};
use super::{Shared, State};
use crate::cluster::retry::is_final;
use crate::cluster::{ClusterError, Request};
use crate::report::{Level, log};
use crate::snapshot::{Decoded, FromParts, Pod};

/// Pods a kubelet runs: the only ones a rotation's nodes can hold.
pub const BOUND: &str = "spec.nodeName!=";
/// A list's page size, as the snapshot's.
const PAGE: u32 = 500;
/// The server closes a watch after this long; it is then resumed.
const WATCH_SECONDS: u32 = 290;

/// How a watch goes on after failures: it rests (100 ms, doubling up to 5 s) and tries again,
/// and gives up once it has failed without a success for longer than the client retries one
/// request (the API server is gone, not restarting). Failures further apart than a streak's
/// rests had a working watch between them (kube's watcher says nothing of a watch it opens).
pub(super) struct Resuming {
    rest: Duration,
    /// The first and the last failure of the streak.
    streak: Option<(Instant, Instant)>,
    budget: Duration,
}

impl Resuming {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(5);
    /// Longer than a rest and a failing request take together.
    const APART: Duration = Duration::from_secs(30);

    pub(super) fn new(budget: Duration) -> Self {
        Resuming {
            rest: Self::FIRST,
            streak: None,
            budget,
        }
    }

    pub(super) fn succeeded(&mut self) {
        self.rest = Self::FIRST;
        self.streak = None;
    }

    /// Rests after a failure; false once the watch has failed for too long.
    pub(super) async fn rested(&mut self) -> bool {
        let now = Instant::now();
        let first = match self.streak {
            Some((first, last)) if now.duration_since(last) < Self::APART => first,
            _ => {
                self.rest = Self::FIRST;
                now
            }
        };
        self.streak = Some((first, now));
        if now.duration_since(first) > self.budget {
            return false;
        }
        tokio::time::sleep(self.rest).await;
        self.rest = (self.rest * 2).min(Self::MOST);
        true
    }
}

/// A watch failure: the view fails, the watch resumes, or it lists again.
pub(super) enum Failure {
    Fatal(ClusterError),
    Resume(String),
    Relist,
}

fn key_of<T>(object: &Decoded<T>) -> Key {
    (object.namespace.clone(), object.name.clone())
}

fn entry_of<W, T>(watched: Watched<W>, convert: &impl Fn(Decoded<W>) -> T) -> (Key, Entry<T>) {
    let version = watched.version();
    let object = watched.object;
    let key = key_of(&object);
    let uid = object.uid.clone();
    let entry = Entry {
        uid,
        version,
        value: Arc::new(convert(object)),
    };
    (key, entry)
}

pub(super) fn classify(error: watcher::Error, request: &Request, server: &str) -> Failure {
    match error {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) => match e {
            kube::Error::Api(s) if s.code == 410 => Failure::Relist,
            e if is_final(&e) => Failure::Fatal(request.error(server, e)),
            e => Failure::Resume(super::super::error_chain(&e)),
        },
        watcher::Error::WatchError(status) if status.code == 403 => {
            Failure::Fatal(request.error(server, kube::Error::Api(status)))
        }
        other => Failure::Resume(other.to_string()),
    }
}

/// Where a watch of a kind whole reports to.
pub(super) struct Watching<'a> {
    /// What the watch is of, as an error names it.
    pub request: Request<'a>,
    pub server: &'a str,
    /// How long a request failing transiently is retried: a watch failing longer gives up.
    pub retry_for: Duration,
}

/// Runs kube's watcher over `api` (a list, then a watch resumed from its last version, a new
/// list when the server no longer has that version), handing each event to `seen`, until a
/// failure that is an answer or that lasts too long, which goes to `failed`.
pub(super) async fn watch_whole<K>(
    watching: Watching<'_>,
    api: Api<K>,
    config: watcher::Config,
    mut seen: impl FnMut(watcher::Event<K>),
    failed: impl FnOnce(ClusterError),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let resource = watching.request.resource;
    let mut resuming = Resuming::new(watching.retry_for);
    loop {
        // A new watcher lists again: what a watch that cannot resume needs.
        let mut events = watcher(api.clone(), config.clone()).boxed();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => match classify(error, &watching.request, watching.server) {
                    Failure::Fatal(error) => return failed(error),
                    Failure::Resume(why) => {
                        log(
                            Level::Debug,
                            &format!("watch of {resource}: {why}; resuming"),
                        );
                        if !resuming.rested().await {
                            return failed(ClusterError::Unreachable {
                                server: watching.server.to_string(),
                                message: format!("watching {resource}: {why}"),
                            });
                        }
                        continue;
                    }
                    Failure::Relist => break,
                },
            };
            resuming.succeeded();
            seen(event);
        }
    }
}

/// Keeps `pick(state)` current with a watch of `api`, each object turned into what the view
/// keeps by `convert`.
pub async fn whole<W, T, F>(
    shared: Arc<Shared>,
    api: Api<Watched<W>>,
    config: watcher::Config,
    resource: &'static str,
    pick: fn(&mut State) -> &mut Whole<T>,
    convert: F,
) where
    W: FromParts + Clone + std::fmt::Debug + Send + 'static,
    T: Send + Sync + 'static,
    F: Fn(Decoded<W>) -> T + Send + 'static,
{
    let watching = Watching {
        request: Request {
            verb: "watch",
            resource,
            namespace: None,
        },
        server: &shared.server,
        retry_for: shared.retry_for,
    };
    let seen = |event| {
        shared.change(|state| {
            let store = pick(state);
            match event {
                watcher::Event::Init => store.begin_list(),
                watcher::Event::InitApply(o) => {
                    let (key, entry) = entry_of(o, &convert);
                    store.listed(key, entry);
                }
                watcher::Event::InitDone => store.end_list(),
                watcher::Event::Apply(o) => {
                    let (key, entry) = entry_of(o, &convert);
                    store.applied(key, entry);
                }
                watcher::Event::Delete(o) => {
                    let version = o.version();
                    store.deleted(&key_of(&o.object), version);
                }
            }
            true
        })
    };
    watch_whole(watching, api, config, seen, |error| shared.fail(error)).await
}

/// Lists the pods of `scope` (page by page, one version) into the view, once the watch of
/// bound pods is open.
pub async fn list_scope(shared: &Shared, api: &Api<Watched<Pod>>, scope: &Scope) {
    let Some(from) = watch_start(shared).await else {
        return;
    };
    let mut resuming = Resuming::new(shared.retry_for);
    loop {
        match read_scope(api, scope, &from).await {
            Ok((pods, version)) => {
                return shared.change(|state| {
                    state.pods.merge_list(scope, pods, version);
                    true
                });
            }
            Err(e) if !is_final(&e) && resuming.rested().await => {}
            Err(e) => {
                let namespace = match scope {
                    Scope::Namespace(ns) => Some(ns.as_str()),
                    Scope::Node(_) => None,
                };
                let request = Request {
                    verb: "list",
                    resource: "pods",
                    namespace,
                };
                shared.change(|state| {
                    state.pods.list_failed();
                    false
                });
                return shared.fail(request.error(&shared.server, e));
            }
        }
    }
}

/// The version the watch of bound pods started from, once it is open; none if the view failed
/// first.
async fn watch_start(shared: &Shared) -> Option<String> {
    let mut changes = shared.changed.subscribe();
    loop {
        {
            let state = shared.lock();
            if state.failed.is_some() {
                return None;
            }
            if let Some(from) = &state.pods_from {
                return Some(from.clone());
            }
        }
        changes.changed().await.ok()?;
    }
}

/// Reads `scope` at a version no older than `from`, where the watch of bound pods started. A
/// read that must be no older than a given version is answered from the API server's cache as
/// soon as the cache has it (at once: the watch is served from there); one that must be current
/// waits for the cache to learn from etcd that it is (Kubernetes 1.31 and later), which measured
/// 70 to 260 ms per read on the 1.37 test cluster.
async fn read_scope(
    api: &Api<Watched<Pod>>,
    scope: &Scope,
    from: &str,
) -> Result<(Vec<(Key, Entry<Pod>)>, u64), kube::Error> {
    let (fields, api) = match scope {
        Scope::Node(node) => (format!("spec.nodeName={node}"), api.clone()),
        Scope::Namespace(ns) => {
            let client = api.clone().into_client();
            let api = Api::namespaced_with(client, ns, &super::pods_resource());
            (BOUND.to_string(), api)
        }
    };
    let mut params = (ListParams::default().fields(&fields).limit(PAGE))
        .at(from)
        .matching(VersionMatch::NotOlderThan);
    let mut pods = Vec::new();
    let mut version = None;
    loop {
        let page = api.list(&params).await?;
        // A paginated list is one consistent read, at its first page's version.
        version.get_or_insert_with(|| {
            version_of(page.metadata.resource_version.as_deref().unwrap_or(""))
        });
        pods.extend(page.items.into_iter().map(|p| entry_of(p, &|o| o.value)));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok((pods, version.unwrap_or(0))),
        }
    }
}

/// The version the server is at now: where a watch of bound pods starts.
async fn version_now(api: &Api<Watched<Pod>>) -> Result<String, kube::Error> {
    let page = api.list(&ListParams::default().limit(1)).await?;
    Ok(page.metadata.resource_version.unwrap_or_default())
}

/// Keeps the view's bound pods current: one watch of every bound pod, its events kept where
/// the run looks. Marks the view started once the first watch is open.
pub async fn bound_pods(shared: Arc<Shared>, api: Api<Watched<Pod>>) {
    let request = Request {
        verb: "watch",
        resource: "pods",
        namespace: None,
    };
    let params = WatchParams::default().fields(BOUND).timeout(WATCH_SECONDS);
    let mut resuming = Resuming::new(shared.retry_for);
    let fail = |e: kube::Error| shared.fail(request.error(&shared.server, e));
    let mut first = true;
    'restart: loop {
        let mut from = match version_now(&api).await {
            Ok(v) => v,
            Err(e) if !is_final(&e) && resuming.rested().await => continue,
            Err(e) => return fail(e),
        };
        let mut relist = !first;
        'watch: loop {
            let stream = match api.watch(&params, &from).await {
                Ok(s) => s,
                Err(kube::Error::Api(s)) if s.code == 410 => continue 'restart,
                Err(e) if !is_final(&e) && resuming.rested().await => continue,
                Err(e) => return fail(e),
            };
            let mut stream = stream.boxed();
            resuming.succeeded();
            if first || relist {
                first = false;
                let started = from.clone();
                shared.change(|state| {
                    state.pods_from = Some(started);
                    true
                });
            }
            if relist {
                // The watch runs from a version newer than any the view holds: every scope is
                // listed again, at versions no older than it.
                relist = false;
                let scopes = shared.change_then(|state| {
                    let scopes = state.pods.relist_all();
                    (!scopes.is_empty(), scopes)
                });
                for scope in scopes {
                    list_scope(&shared, &api, &scope).await;
                }
            }
            let idle = Duration::from_secs(u64::from(WATCH_SECONDS) + 5);
            loop {
                let event = match tokio::time::timeout(idle, stream.next()).await {
                    Ok(Some(Ok(event))) => event,
                    // Closed by the server, or silent too long: resumed where it was.
                    Ok(None) | Err(_) => continue 'watch,
                    Ok(Some(Err(e))) => {
                        log(Level::Debug, &format!("watch of pods: {e}; resuming"));
                        break;
                    }
                };
                match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                        from = o.object.resource_version.clone();
                        let (key, entry) = entry_of(o, &|o| o.value);
                        shared.change(|state| state.pods.applied(key, entry));
                    }
                    WatchEvent::Deleted(o) => {
                        from = o.object.resource_version.clone();
                        let version = o.version();
                        let key = key_of(&o.object);
                        shared.change(|state| state.pods.deleted(key, &o.object.uid, version));
                    }
                    WatchEvent::Bookmark(b) => from = b.metadata.resource_version,
                    WatchEvent::Error(s) if s.code == 410 => {
                        log(
                            Level::Debug,
                            "watch of pods: its version is gone; listing again",
                        );
                        continue 'restart;
                    }
                    WatchEvent::Error(s) if s.code == 403 => return fail(kube::Error::Api(s)),
                    WatchEvent::Error(s) => {
                        log(
                            Level::Debug,
                            &format!("watch of pods: {}; resuming", s.message),
                        );
                        break;
                    }
                }
            }
            if !resuming.rested().await {
                return shared.fail(ClusterError::Unreachable {
                    server: shared.server.clone(),
                    message: "the watch of pods kept failing".into(),
                });
            }
        }
    }
}
