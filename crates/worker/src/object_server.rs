//! This process's object server: other processes holding references to objects it owns
//! fetch them here and report the references they take and drop.

use crate::objects::{ObjectTable, Use};
use crate::tasks::ActorOwner;
use oxray_proto::v1::{self, object_service_server};
use oxray_rpc::{ServerAuth, Token};
use std::sync::Arc;
use tonic::{Request, Response, Status};

struct Service {
    objects: Arc<ObjectTable>,
    actors: Arc<dyn ActorOwner>,
}

#[tonic::async_trait]
impl object_service_server::ObjectService for Service {
    async fn get_object(&self, request: Request<v1::GetObjectRequest>) -> Result<Response<v1::GetObjectReply>, Status> {
        let request = request.into_inner();
        let id = request.object_id;
        if request.inline {
            if let Some(file) = self.objects.stored_file(&id) {
                let data =
                    tokio::fs::read(&file.path).await.map_err(|e| Status::not_found(format!("object {id}: {e}")))?;
                return Ok(Response::new(v1::GetObjectReply { data, outcome: 0 }));
            }
        }
        if self.objects.owner_of(&id).is_some() {
            return Err(Status::failed_precondition(format!("object {id} is not owned by this process")));
        }
        let ready = self
            .objects
            .get(std::slice::from_ref(&id), None)
            .await
            .map_err(|e| Status::not_found(e.to_string()))?
            .swap_remove(0);
        Ok(Response::new(v1::GetObjectReply { data: ready.data.to_vec(), outcome: ready.outcome as u32 }))
    }

    async fn update_refs(
        &self,
        request: Request<v1::UpdateRefsRequest>,
    ) -> Result<Response<v1::UpdateRefsReply>, Status> {
        for change in request.into_inner().changes {
            for _ in 0..change.delta.max(0) {
                self.objects.add_use(&change.object_id, Use::Remote);
            }
            for _ in 0..(-change.delta).max(0) {
                self.objects.release_use(&change.object_id, Use::Remote);
            }
        }
        Ok(Response::new(v1::UpdateRefsReply {}))
    }

    async fn actor_failed(
        &self,
        request: Request<v1::ActorFailedRequest>,
    ) -> Result<Response<v1::ActorFailedReply>, Status> {
        let r = request.into_inner();
        let reply = match self.actors.failed(&r.actor_id, &r.address).await {
            Ok(address) => v1::ActorFailedReply { address, dead_reason: String::new() },
            Err(dead_reason) => v1::ActorFailedReply { address: String::new(), dead_reason },
        };
        Ok(Response::new(reply))
    }

    async fn kill_actor(&self, request: Request<v1::KillActorRequest>) -> Result<Response<v1::KillActorReply>, Status> {
        let r = request.into_inner();
        self.actors.kill(&r.actor_id, r.no_restart).await?;
        Ok(Response::new(v1::KillActorReply {}))
    }

    async fn list_objects(
        &self,
        request: Request<v1::ListObjectsRequest>,
    ) -> Result<Response<v1::ListObjectsReply>, Status> {
        let limit = request.into_inner().limit as usize;
        let pinned = crate::objects::pinned::of_this_process();
        let (objects, total) = self.objects.entries(if limit == 0 { usize::MAX } else { limit }, &pinned);
        Ok(Response::new(v1::ListObjectsReply { objects, total: total as u64 }))
    }

    async fn cancel_task(
        &self,
        request: Request<v1::CancelTaskRequest>,
    ) -> Result<Response<v1::CancelTaskReply>, Status> {
        let r = request.into_inner();
        let was_running = self.actors.cancel(&r.task_id, r.force).await;
        Ok(Response::new(v1::CancelTaskReply { was_running }))
    }
}

/// Serves the table, and the actors this process owns, on a free port of every interface;
/// returns the port.
pub async fn serve(
    objects: Arc<ObjectTable>,
    actors: Arc<dyn ActorOwner>,
    token: Token,
) -> Result<u16, crate::WorkerError> {
    let cannot = |e: std::io::Error| crate::WorkerError::Failed(format!("cannot serve this process's objects: {e}"));
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", 0)).await.map_err(cannot)?;
    let port = listener.local_addr().map_err(cannot)?.port();
    let server = object_service_server::ObjectServiceServer::new(Service { objects, actors })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let service = tonic::service::interceptor::InterceptedService::new(server, ServerAuth(token));
    tokio::spawn(oxray_rpc::server().add_service(service).serve_with_incoming(oxray_rpc::incoming(listener)));
    Ok(port)
}
