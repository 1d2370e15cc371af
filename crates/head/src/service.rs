use crate::jobs::JobManager;
use crate::membership::{Membership, MembershipError, Verdict};
use oxray_api_types::ApiError;
use oxray_proto::convert::{resources_from_proto, ConvertError};
use oxray_proto::v1::{self, head_service_server};
use oxray_types::{NodeId, NodeInfo};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tonic::{Request, Response, Status};

pub struct HeadService {
    pub membership: Arc<Membership>,
    pub jobs: Arc<JobManager>,
    pub actors: Arc<crate::actors::Actors>,
    pub groups: Arc<crate::placement_groups::PlacementGroups>,
    pub states: Arc<crate::task_states::TaskStates>,
    pub session_name: String,
    pub dashboard: crate::Dashboard,
    pub processes: Arc<crate::processes::Processes>,
    pub serve: Arc<oxray_serve::Serve>,
    /// Ends the node change streams when the head stops.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// What waits for room, as the agents report it.
    pub demand: Arc<crate::demand::Demand>,
}

impl HeadService {
    /// Several heartbeats fit in one death timeout, so one lost heartbeat kills no node.
    fn heartbeat_interval(&self) -> Duration {
        (self.membership.death_timeout() / 5).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

fn invalid(e: ConvertError) -> Status {
    Status::invalid_argument(e.to_string())
}

fn parse_id(text: &str) -> Result<NodeId, Status> {
    text.parse().map_err(|e: oxray_types::IdError| Status::invalid_argument(e.to_string()))
}

fn actor_status(e: crate::actors::ActorError) -> Status {
    use crate::actors::ActorError;
    match e {
        ActorError::Exists(..) => Status::already_exists(e.to_string()),
        ActorError::Missing(..) => Status::not_found(e.to_string()),
        ActorError::Store(_) => internal(e),
    }
}

fn group_status(e: crate::placement_groups::GroupError) -> Status {
    use crate::placement_groups::GroupError;
    match e {
        GroupError::Invalid(_) => Status::invalid_argument(e.to_string()),
        GroupError::Missing(_) => Status::not_found(e.to_string()),
        GroupError::Exists(..) => Status::already_exists(e.to_string()),
    }
}

/// Long waits are cut into pieces the callers' call deadlines allow.
const LONGEST_WAIT: Duration = Duration::from_secs(5);

fn internal(e: impl std::fmt::Display) -> Status {
    tracing::error!("{e}");
    Status::internal(e.to_string())
}

const PACKAGE_CHUNK: usize = 1 << 20;

#[tonic::async_trait]
impl head_service_server::HeadService for HeadService {
    type GetPackageStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<v1::DataChunk, Status>> + Send>>;
    type WatchNodesStream = tokio_stream::wrappers::ReceiverStream<Result<v1::NodesChange, Status>>;

    async fn watch_nodes(
        &self,
        request: Request<v1::WatchNodesRequest>,
    ) -> Result<Response<Self::WatchNodesStream>, Status> {
        let deaths_only = request.into_inner().deaths_only;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let membership = self.membership.clone();
        let shutdown = self.shutdown.clone();
        // Ends when the agent goes (it drops the stream) or the head stops.
        tokio::spawn(async move {
            let mut changed = membership.subscribe();
            let mut since = None;
            loop {
                changed.borrow_and_update();
                let (version, mut nodes) = membership.changes_since(since);
                if deaths_only {
                    nodes.retain(|n| !n.is_alive());
                }
                if (since.is_none() && !deaths_only) || !nodes.is_empty() {
                    let nodes = nodes.iter().map(v1::Node::from).collect();
                    let change = v1::NodesChange { version, full: since.is_none() && !deaths_only, nodes };
                    if tx.send(Ok(change)).await.is_err() {
                        return;
                    }
                }
                since = Some(version);
                tokio::select! {
                    moved = changed.changed() => if moved.is_err() { return },
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    type WatchServeRoutesStream = tokio_stream::wrappers::ReceiverStream<Result<v1::ServeRoutes, Status>>;

    async fn watch_serve_routes(
        &self,
        _request: Request<v1::WatchServeRoutesRequest>,
    ) -> Result<Response<Self::WatchServeRoutesStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let serve = self.serve.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut changed = serve.controller().subscribe_routes();
            let mut sent = Vec::new();
            loop {
                changed.borrow_and_update();
                let table = serde_json::to_vec(&serve.table()).expect("the routing table serializes");
                if table != sent {
                    if tx.send(Ok(v1::ServeRoutes { table: table.clone() })).await.is_err() {
                        return;
                    }
                    sent = table;
                }
                tokio::select! {
                    moved = changed.changed() => if moved.is_err() { return },
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn report_serve_proxy(
        &self,
        request: Request<v1::ServeProxyReport>,
    ) -> Result<Response<v1::ServeProxyReportReply>, Status> {
        let r = request.into_inner();
        let queued: Vec<(String, String, i64)> =
            r.queued.into_iter().map(|q| (q.app, q.deployment, q.requests)).collect();
        self.serve.report_node_proxy(&r.node_id, &r.node_ip, r.running, &queued);
        Ok(Response::new(v1::ServeProxyReportReply {}))
    }

    async fn report_events(
        &self,
        request: Request<v1::ReportEventsRequest>,
    ) -> Result<Response<v1::ReportEventsReply>, Status> {
        self.states.apply(request.into_inner());
        Ok(Response::new(v1::ReportEventsReply {}))
    }

    async fn announce_process(
        &self,
        request: Request<v1::ProcessInfo>,
    ) -> Result<Response<v1::AnnounceProcessReply>, Status> {
        self.processes.announce(request.into_inner());
        Ok(Response::new(v1::AnnounceProcessReply {}))
    }

    type RegisterDriverStream = tokio_stream::wrappers::ReceiverStream<Result<v1::DriverJob, Status>>;

    async fn register_driver(
        &self,
        request: Request<v1::DriverInfo>,
    ) -> Result<Response<Self::RegisterDriverStream>, Status> {
        let (job, claim) = self.jobs.drivers().register(request.into_inner()).await.map_err(internal)?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        // A new channel has room for its first message.
        let _ = tx.try_send(Ok(v1::DriverJob { job_id: job.hex() }));
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tx.closed() => drop(claim),
                // The driver registers again with the next head.
                _ = shutdown.cancelled() => claim.keep_open(),
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn register_actor(
        &self,
        request: Request<v1::NamedActor>,
    ) -> Result<Response<v1::RegisterActorReply>, Status> {
        self.actors.register(request.into_inner()).await.map_err(actor_status)?;
        Ok(Response::new(v1::RegisterActorReply {}))
    }

    async fn get_actor(&self, request: Request<v1::GetActorRequest>) -> Result<Response<v1::NamedActor>, Status> {
        let r = request.into_inner();
        self.actors.get(&r.name, &r.namespace).map(Response::new).map_err(actor_status)
    }

    async fn list_actors(
        &self,
        request: Request<v1::ListActorsRequest>,
    ) -> Result<Response<v1::ListActorsReply>, Status> {
        let namespace = request.into_inner().namespace;
        let actors = self.actors.list(Some(namespace.as_str()).filter(|ns| !ns.is_empty()));
        Ok(Response::new(v1::ListActorsReply { actors }))
    }

    async fn remove_actor(
        &self,
        request: Request<v1::GetActorRequest>,
    ) -> Result<Response<v1::RemoveActorReply>, Status> {
        let r = request.into_inner();
        self.actors.remove(&r.name, &r.namespace).await.map_err(actor_status)?;
        Ok(Response::new(v1::RemoveActorReply {}))
    }

    async fn create_placement_group(
        &self,
        request: Request<v1::CreatePlacementGroupRequest>,
    ) -> Result<Response<v1::PlacementGroup>, Status> {
        self.groups.create(request.into_inner()).map(Response::new).map_err(group_status)
    }

    async fn remove_placement_group(
        &self,
        request: Request<v1::PlacementGroupRef>,
    ) -> Result<Response<v1::RemovePlacementGroupReply>, Status> {
        let id = request.into_inner().placement_group_id;
        self.groups.remove(&id).await.map_err(group_status)?;
        Ok(Response::new(v1::RemovePlacementGroupReply {}))
    }

    async fn get_placement_group(
        &self,
        request: Request<v1::PlacementGroupRef>,
    ) -> Result<Response<v1::PlacementGroup>, Status> {
        self.groups.get(&request.into_inner()).map(Response::new).map_err(group_status)
    }

    async fn wait_placement_group(
        &self,
        request: Request<v1::WaitPlacementGroupRequest>,
    ) -> Result<Response<v1::PlacementGroup>, Status> {
        let r = request.into_inner();
        let timeout = if r.timeout_s > 0.0 && r.timeout_s.is_finite() {
            Duration::from_secs_f64(r.timeout_s).min(LONGEST_WAIT)
        } else {
            LONGEST_WAIT
        };
        self.groups.wait(&r.placement_group_id, timeout).await.map(Response::new).map_err(group_status)
    }

    async fn list_placement_groups(
        &self,
        _request: Request<v1::ListPlacementGroupsRequest>,
    ) -> Result<Response<v1::ListPlacementGroupsReply>, Status> {
        Ok(Response::new(v1::ListPlacementGroupsReply { placement_groups: self.groups.list() }))
    }

    async fn report_job(&self, request: Request<v1::JobReport>) -> Result<Response<v1::ReportJobReply>, Status> {
        match self.jobs.report(request.into_inner()).await {
            Ok(()) => Ok(Response::new(v1::ReportJobReply {})),
            Err(ApiError::BadRequest(m)) => Err(Status::invalid_argument(m)),
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    async fn append_job_log(&self, request: Request<v1::JobLogChunk>) -> Result<Response<v1::JobLogAck>, Status> {
        let chunk = request.into_inner();
        match self.jobs.append_log(&chunk.submission_id, chunk.offset, chunk.data).await {
            Ok(size) => Ok(Response::new(v1::JobLogAck { size })),
            Err(ApiError::NotFound(m)) => Err(Status::not_found(m)),
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    async fn get_package(
        &self,
        request: Request<v1::GetPackageRequest>,
    ) -> Result<Response<Self::GetPackageStream>, Status> {
        let uri = request.into_inner().uri;
        let name = oxray_runtime_env::package_name(&uri)
            .ok_or_else(|| Status::invalid_argument(format!("invalid package URI {uri:?}")))?;
        let file = tokio::fs::File::open(self.jobs.packages().path(name))
            .await
            .map_err(|_| Status::not_found(format!("package {uri} does not exist")))?;
        let stream = futures_util::stream::unfold(Some(file), |state| async move {
            let mut file = state?;
            let mut buf = vec![0u8; PACKAGE_CHUNK];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(v1::DataChunk { data: buf }), Some(file)))
                }
                Err(e) => Some((Err(Status::internal(e.to_string())), None)),
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn register_node(
        &self,
        request: Request<v1::RegisterNodeRequest>,
    ) -> Result<Response<v1::RegisterNodeReply>, Status> {
        let request = request.into_inner();
        if let Some(why) = oxray_config::version_mismatch(oxray_config::VERSION, &request.version) {
            return Err(Status::invalid_argument(why));
        }
        let node = request.node.ok_or_else(|| invalid(ConvertError::MissingNode))?;
        let info = NodeInfo::try_from(node).map_err(invalid)?;
        match self.membership.register(info).await {
            Ok(()) => Ok(Response::new(v1::RegisterNodeReply {
                session_name: self.session_name.clone(),
                heartbeat_interval_ms: self.heartbeat_interval().as_millis() as u64,
                dashboard_url: self.dashboard.url.clone(),
                autoscaling: self.jobs.autoscaling(),
            })),
            Err(e @ MembershipError::NodeDead(_)) => Err(Status::failed_precondition(e.to_string())),
            Err(MembershipError::Store(e)) => Err(internal(e)),
        }
    }

    async fn heartbeat(&self, request: Request<v1::HeartbeatRequest>) -> Result<Response<v1::HeartbeatReply>, Status> {
        let request = request.into_inner();
        let id = parse_id(&request.node_id)?;
        let available = resources_from_proto(request.resources_available).map_err(invalid)?;
        let idle = self.membership.get(&id).is_some_and(|node| {
            crate::demand::holds_nothing(request.busy, &node.resources_total, &available, request.usage.as_ref())
        });
        let verdict = match self.membership.heartbeat(&id, available) {
            Verdict::Ok => {
                if let Some(usage) = request.usage {
                    self.membership.usage().record(&request.node_id, crate::usage_history::from_proto(usage));
                }
                self.demand.report(&request.node_id, request.demand, idle, std::time::Instant::now());
                v1::HeartbeatVerdict::Ok
            }
            Verdict::UnknownNode => v1::HeartbeatVerdict::UnknownNode,
            Verdict::NodeDead => v1::HeartbeatVerdict::NodeDead,
        };
        Ok(Response::new(v1::HeartbeatReply { verdict: verdict as i32, autoscaling: self.jobs.autoscaling() }))
    }

    async fn unregister_node(
        &self,
        request: Request<v1::UnregisterNodeRequest>,
    ) -> Result<Response<v1::UnregisterNodeReply>, Status> {
        let request = request.into_inner();
        let id = parse_id(&request.node_id)?;
        let reason = if request.reason.is_empty() { "node stopped".to_string() } else { request.reason };
        self.membership.unregister(&id, &reason).await.map_err(internal)?;
        Ok(Response::new(v1::UnregisterNodeReply {}))
    }

    async fn list_nodes(
        &self,
        _request: Request<v1::ListNodesRequest>,
    ) -> Result<Response<v1::ListNodesReply>, Status> {
        let nodes = self.membership.snapshot().iter().map(v1::Node::from).collect();
        Ok(Response::new(v1::ListNodesReply { nodes }))
    }

    async fn get_cluster_info(
        &self,
        _request: Request<v1::GetClusterInfoRequest>,
    ) -> Result<Response<v1::ClusterInfo>, Status> {
        Ok(Response::new(v1::ClusterInfo {
            session_name: self.session_name.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            dashboard_host: self.dashboard.host.clone(),
            dashboard_port: self.dashboard.port as u32,
            dashboard_url: self.dashboard.url.clone(),
            pending_demands: crate::demand::Pending {
                demand: &self.demand,
                jobs: &self.jobs,
                groups: &self.groups,
                membership: &self.membership,
            }
            .lines(),
        }))
    }
}
