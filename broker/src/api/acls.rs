//! DescribeAcls, CreateAcls and DeleteAcls without an authorizer: every request is answered
//! SECURITY_DISABLED, as Kafka answers them when no `authorizer.class.name` is set. Every
//! client may do everything (see `crate::api::metadata::authorized_operations`).

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::create_acls_response::AclCreationResult;
use net::kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use net::kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use net::kafka_protocol::protocol::StrBytes;

/// Kafka's message for these APIs when it has no authorizer.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

fn message() -> Option<StrBytes> {
    Some(StrBytes::from_static_str(NO_AUTHORIZER))
}

const SECURITY_DISABLED: i16 = ResponseError::SecurityDisabled.code();

pub fn describe(_request: DescribeAclsRequest) -> DescribeAclsResponse {
    DescribeAclsResponse::default()
        .with_error_code(SECURITY_DISABLED)
        .with_error_message(message())
}

/// One refusal per ACL asked for, in order.
pub fn create(request: CreateAclsRequest) -> CreateAclsResponse {
    let results = request
        .creations
        .iter()
        .map(|_| {
            AclCreationResult::default()
                .with_error_code(SECURITY_DISABLED)
                .with_error_message(message())
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// One refusal per filter, in order, with nothing matched.
pub fn delete(request: DeleteAclsRequest) -> DeleteAclsResponse {
    let results = request
        .filters
        .iter()
        .map(|_| {
            DeleteAclsFilterResult::default()
                .with_error_code(SECURITY_DISABLED)
                .with_error_message(message())
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::kafka_protocol::messages::create_acls_request::AclCreation;
    use net::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    #[test]
    fn every_acl_request_is_answered_security_disabled_one_result_each() {
        let d = describe(DescribeAclsRequest::default());
        assert_eq!(d.error_code, SECURITY_DISABLED);
        assert!(d.resources.is_empty());

        let c =
            create(CreateAclsRequest::default().with_creations(vec![AclCreation::default(); 3]));
        assert_eq!(c.results.len(), 3);
        assert!(c.results.iter().all(|r| r.error_code == SECURITY_DISABLED));

        let x =
            delete(DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default(); 2]));
        assert_eq!(x.filter_results.len(), 2);
        assert!(
            x.filter_results
                .iter()
                .all(|r| r.error_code == SECURITY_DISABLED && r.matching_acls.is_empty())
        );
    }
}
