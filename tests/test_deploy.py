"""The AWS stack (`deploy/stack.yaml`): cfn-lint, a create/describe/delete cycle on the moto
server, `launch --stack` reading its outputs, and the one-line refusals around it.

What moto (5.2) does not do with this template, so what these tests cannot check there:
- it cannot delete, from a stack, the internet gateway, its VPCGatewayAttachment, the route
  table, its Route and SubnetRouteTableAssociations (their moto models have no delete), and it
  keeps a terminated instance's network interface in the VPC: deleting the whole stack fails
  with DependencyViolation on the VPC. The delete cycle therefore runs on a template derived
  from the shipped one without those resources and the instance (`_deletable`);
- it ignores the functions' security group's egress rules (it keeps the allow-all default),
  the ECR repository's policy, the instance's SecurityGroupIds, and the subnets'
  MapPublicIpOnLaunch, so the instance has no public IP and the `Tunnel` output keeps its
  `${ParameterServer.PublicIp}`; those are checked in the template itself;
- it runs no user data, so no Redis ever starts; the template has not been deployed on AWS.
"""

from __future__ import annotations

import ast
import base64
import configparser
import copy
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError, NoCredentialsError
from click.testing import CliRunner

from lambdadnn import solve
from lambdadnn.cli import main
from lambdadnn.launcher.aws import AwsLaunchError, AwsTarget, required_policy
from lambdadnn.launcher.stack import OUTPUTS, StackError, stack_outputs, template

pytestmark = pytest.mark.real  # a moto server and cfn-lint's process

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "stack.yaml"
REGION = "us-east-1"
PASSWORD = "s3cretPassw0rdForTests"
ROLE = "arn:aws:iam::123456789012:role/lambdadnn-worker"
SUBNET, GROUP = "subnet-0123456789abcdef0", "sg-0123456789abcdef0"
# What moto cannot delete from a stack (see the module's docstring), and what depends on it.
UNDELETABLE = ("InternetGateway", "GatewayAttachment", "RouteTable", "InternetRoute",
               "SubnetARoutes", "SubnetBRoutes", "ParameterServer")


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short forms (`!Ref X` → {"Ref": "X"}, `!Sub` → Fn::Sub…)."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        assert isinstance(node, yaml.MappingNode)
        value = loader.construct_mapping(node, deep=True)
    return {"Ref" if suffix == "Ref" else f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _short_form)


def parsed(text: str) -> dict[str, Any]:
    document = yaml.load(text, Loader=_CfnLoader)  # a SafeLoader with the short forms
    assert isinstance(document, dict)
    return document


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def assert_one_line(code: int, out: str, err: str, fragment: str) -> None:
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: "), err
    assert fragment in err and "Traceback" not in out + err, err


# -- the template itself ----------------------------------------------------------------------


def _cfn_lint(path: Path) -> subprocess.CompletedProcess[str]:
    command = shutil.which("cfn-lint", path=str(Path(sys.executable).parent))
    assert command is not None, "cfn-lint is not installed: pip install -e '.[test]'"
    return subprocess.run([command, "--regions", REGION, "--", str(path)],
                          capture_output=True, text=True, check=False)


def test_the_template_passes_cfn_lint() -> None:
    done = _cfn_lint(TEMPLATE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_cfn_lint_does_check_the_template(tmp_path: Path) -> None:
    """A misspelt resource type fails the same run: the lint above did look at the file."""
    broken = tmp_path / "stack.yaml"
    broken.write_text(TEMPLATE.read_text().replace("AWS::EC2::Instance", "AWS::EC2::Instanse"))
    done = _cfn_lint(broken)
    assert done.returncode != 0 and "AWS::EC2::Instanse" in done.stdout, done.stdout


def test_deploy_print_writes_the_shipped_template() -> None:
    code, out, err = run("deploy", "--print")
    assert code == 0 and err == "", err
    assert out == TEMPLATE.read_text(encoding="utf-8") == template()
    document = parsed(out)
    assert set(OUTPUTS) <= set(document["Outputs"])
    assert document["Resources"]["ParameterServer"]["Type"] == "AWS::EC2::Instance"


def test_deploy_without_print_is_one_line() -> None:
    assert_one_line(*run("deploy"), "pass `--print`")


def test_the_template_ships_as_package_data() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    patterns = [p.strip() for p in config["options.package_data"]["lambdadnn"].split(",")]
    assert any(fnmatch.fnmatch("deploy/stack.yaml", pattern) for pattern in patterns)
    assert "cfn-lint" in config["options.extras_require"]["test"]


def test_the_parameter_server_is_the_priced_vm() -> None:
    """m5.large is $0.096/h on demand in us-east-1: every shipped instance's one PS, and the
    catalogue's m5.large, which the stack's Redis runs on by default."""
    catalogue = yaml.safe_load((ROOT / "instances" / "servers" / "ec2.yaml").read_text())
    prices = set()
    for path in (ROOT / "instances").glob("*.yaml"):
        server = yaml.safe_load(path.read_text())["parameter_server"]
        if "catalogue" in server:
            assert server["catalogue"] == "ec2"
        else:
            prices.add(server["price_per_hour"])
    assert prices == {catalogue["types"]["m5.large"]["price_per_hour"]} == {0.096}
    assert parsed(TEMPLATE.read_text())["Parameters"]["PsInstanceType"]["Default"] == "m5.large"


def test_the_functions_may_reach_the_redis_port_and_nothing_else() -> None:
    """Checked in the template: moto ignores the egress rules and the repository policy."""
    resources = parsed(TEMPLATE.read_text())["Resources"]
    egress = resources["FunctionSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert egress == [{"IpProtocol": "tcp", "FromPort": 6379, "ToPort": 6379,
                       "DestinationSecurityGroupId": {"Ref": "RedisSecurityGroup"}}]
    ingress = {name: r["Properties"] for name, r in resources.items()
               if r["Type"] == "AWS::EC2::SecurityGroupIngress"}
    assert ingress["RedisFromFunctions"]["SourceSecurityGroupId"] == {"Ref":
                                                                     "FunctionSecurityGroup"}
    assert {(p["FromPort"], p["ToPort"]) for p in ingress.values()} == {(6379, 6379), (22, 22)}
    assert resources["SshToParameterServer"]["Condition"] == "HasSsh"
    pull = resources["WorkerRepository"]["Properties"]["RepositoryPolicyText"]["Statement"]
    assert [s["Principal"] for s in pull] == [{"Service": "lambda.amazonaws.com"}]
    assert sorted(pull[0]["Action"]) == ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


# -- the stack on the moto server -------------------------------------------------------------


def _dummy_aws(patch: pytest.MonkeyPatch) -> None:
    """Dummy credentials, no profile or config file: nothing can reach real AWS."""
    import boto3

    # boto3's default session keeps the first credentials it finds: the CLI's clients here
    # must not leave the dummy ones to later tests of missing credentials.
    patch.setattr(boto3, "DEFAULT_SESSION", None)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        patch.delenv(name, raising=False)
    patch.setenv("AWS_CONFIG_FILE", os.devnull)
    patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    patch.setenv("AWS_ACCESS_KEY_ID", "testing")
    patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    patch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def aws_env() -> Iterator[dict[str, str]]:
    """The moto server of `.ci/with-services`, with dummy credentials."""
    endpoint = os.environ.get("MOTO_ENDPOINT")
    if not endpoint:
        pytest.skip("MOTO_ENDPOINT is not set: run under .ci/with-services (`make test` does)")
    with pytest.MonkeyPatch.context() as patch:
        _dummy_aws(patch)
        yield {"endpoint_url": endpoint, "region_name": REGION}


def client(service: str, aws_env: dict[str, str]) -> Any:
    import boto3

    return boto3.client(service, **aws_env)


def create(cfn: Any, body: str, **parameters: str) -> str:
    """Create a stack of a unique name from `body`; returns the name once it is complete."""
    name = f"lambdadnn-test-{uuid.uuid4().hex[:8]}"
    cfn.create_stack(StackName=name, TemplateBody=body,
                     Capabilities=["CAPABILITY_IAM"],
                     Parameters=[{"ParameterKey": k, "ParameterValue": v}
                                 for k, v in parameters.items()])
    cfn.get_waiter("stack_create_complete").wait(
        StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    return name


@pytest.fixture(scope="module")
def stack(aws_env: dict[str, str]) -> str:
    """The shipped template, deployed whole (moto cannot delete it: see the docstring)."""
    return create(client("cloudformation", aws_env), TEMPLATE.read_text(),
                  RedisPassword=PASSWORD, RepositoryName=f"lambdadnn-{uuid.uuid4().hex[:8]}",
                  SshCidr="203.0.113.7/32")


def test_the_stack_is_created_with_the_outputs_launch_needs(
    stack: str, aws_env: dict[str, str]
) -> None:
    cfn = client("cloudformation", aws_env)
    described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    assert described["StackStatus"] == "CREATE_COMPLETE"
    outputs = stack_outputs(cfn, stack)
    resources = {r["LogicalResourceId"]: r["PhysicalResourceId"]
                 for r in cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]}
    assert outputs.role_arn.endswith(f":role/{resources['WorkerRole']}")
    assert outputs.repository_uri.endswith(f"/{resources['WorkerRepository']}")
    assert outputs.subnet_ids == (resources["SubnetA"], resources["SubnetB"])
    assert outputs.security_group_ids == (resources["FunctionSecurityGroup"],)
    ec2 = client("ec2", aws_env)
    server = ec2.describe_instances(InstanceIds=[resources["ParameterServer"]])
    instance = server["Reservations"][0]["Instances"][0]
    assert outputs.redis_url == f"redis://:{PASSWORD}@{instance['PrivateIpAddress']}:6379/0"
    assert instance["InstanceType"] == "m5.large"
    user_data = ec2.describe_instance_attribute(InstanceId=instance["InstanceId"],
                                                Attribute="userData")["UserData"]["Value"]
    assert f"requirepass %s\\n' '{PASSWORD}'" in base64.b64decode(user_data).decode()
    subnets = ec2.describe_subnets(SubnetIds=list(outputs.subnet_ids))["Subnets"]
    assert len({subnet["AvailabilityZone"] for subnet in subnets}) == 2  # Lambda wants two AZs
    # Redis's group admits 6379 from the functions' group, and SSH from SshCidr only.
    redis_group = ec2.describe_security_groups(
        GroupIds=[resources["RedisSecurityGroup"]])["SecurityGroups"][0]
    rules = {(p["FromPort"], tuple(g["GroupId"] for g in p["UserIdGroupPairs"]),
              tuple(r["CidrIp"] for r in p["IpRanges"])) for p in redis_group["IpPermissions"]}
    assert rules == {(6379, outputs.security_group_ids, ()), (22, (), ("203.0.113.7/32",))}


def test_the_role_is_the_functions_and_grants_logs_and_network_interfaces_only(
    stack: str, aws_env: dict[str, str]
) -> None:
    role_name = stack_outputs(client("cloudformation", aws_env), stack).role_arn.split("/")[-1]
    iam = client("iam", aws_env)
    trust = iam.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "lambda.amazonaws.com"}]
    (policy,) = iam.list_role_policies(RoleName=role_name)["PolicyNames"]
    assert iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"] == []
    document = iam.get_role_policy(RoleName=role_name, PolicyName=policy)["PolicyDocument"]
    if isinstance(document, str):  # moto_server answers with the Python repr of a stack's policy
        document = ast.literal_eval(document)
    statements = document["Statement"]
    granted = {action: s["Resource"] for s in statements for action in s["Action"]}
    assert set(granted) == {
        "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
        "ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
        "ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
    }
    assert granted["logs:PutLogEvents"] == (
        f"arn:aws:logs:{REGION}:123456789012:log-group:/aws/lambda/lambdadnn-*")


def _deletable() -> str:
    """The shipped template without what moto cannot delete, nor the outputs naming it."""
    body = copy.deepcopy(parsed(TEMPLATE.read_text()))
    for name in UNDELETABLE:
        del body["Resources"][name]
    for name in ("RedisUrl", "Tunnel"):
        del body["Outputs"][name]
    return json.dumps(body)


def test_the_stack_is_deleted_with_everything_it_created(aws_env: dict[str, str]) -> None:
    cfn = client("cloudformation", aws_env)
    repository = f"lambdadnn-{uuid.uuid4().hex[:8]}"
    name = create(cfn, _deletable(), RedisPassword=PASSWORD, RepositoryName=repository)
    resources = {r["LogicalResourceId"]: r["PhysicalResourceId"]
                 for r in cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]}
    stack_id = cfn.describe_stacks(StackName=name)["Stacks"][0]["StackId"]
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=stack_id, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    assert cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"] == (
        "DELETE_COMPLETE")
    ec2 = client("ec2", aws_env)
    assert ec2.describe_vpcs(Filters=[{"Name": "vpc-id",
                                       "Values": [resources["Vpc"]]}])["Vpcs"] == []
    with pytest.raises(ClientError, match="NoSuchEntity"):
        client("iam", aws_env).get_role(RoleName=resources["WorkerRole"])
    with pytest.raises(ClientError, match="RepositoryNotFound"):
        client("ecr", aws_env).describe_repositories(repositoryNames=[repository])
    with pytest.raises(StackError, match="does not exist"):
        stack_outputs(cfn, name)


# -- launch --stack ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan = solve("instances/1dcnn-imdb.yaml").to_dict()
    plan.update(functions=2, iterations=120)
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def test_launch_dry_run_deploys_into_the_stacks_vpc(
    stack: str, aws_env: dict[str, str], plan_file: Path
) -> None:
    outputs = stack_outputs(client("cloudformation", aws_env), stack)
    code, out, err = run("launch", str(plan_file), "--stack", stack, "--backend", "aws",
                         "--dry-run", "--endpoint-url", aws_env["endpoint_url"])
    assert code == 0 and err == "", err
    create_call = json.loads(out)[0]
    assert create_call["operation"] == "CreateFunction"
    params = create_call["params"]
    assert params["Role"] == outputs.role_arn
    assert params["VpcConfig"] == {"SubnetIds": list(outputs.subnet_ids),
                                   "SecurityGroupIds": list(outputs.security_group_ids)}
    assert params["Code"] == {"ImageUri": f"{outputs.repository_uri}:latest"}
    assert params["Environment"]["Variables"]["LAMBDADNN_REDIS_URL"] == outputs.redis_url


def test_launch_options_given_win_over_the_stacks_outputs(
    stack: str, aws_env: dict[str, str], plan_file: Path
) -> None:
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:7"
    code, out, err = run("launch", str(plan_file), "--stack", stack, "--backend", "aws",
                         "--dry-run", "--endpoint-url", aws_env["endpoint_url"],
                         "--role-arn", ROLE, "--image-uri", image, "--subnet-ids", SUBNET,
                         "--redis-url", "redis://10.0.0.9:6379/0")
    assert code == 0, err
    params = json.loads(out)[0]["params"]
    outputs = stack_outputs(client("cloudformation", aws_env), stack)
    assert params["Role"] == ROLE and params["Code"] == {"ImageUri": image}
    assert params["VpcConfig"] == {"SubnetIds": [SUBNET],  # the groups still the stack's
                                   "SecurityGroupIds": list(outputs.security_group_ids)}
    assert params["Environment"]["Variables"]["LAMBDADNN_REDIS_URL"] == "redis://10.0.0.9:6379/0"


def test_launch_of_an_unknown_stack_is_one_line(
    aws_env: dict[str, str], plan_file: Path
) -> None:
    assert_one_line(*run("launch", str(plan_file), "--stack", "no-such-stack", "--backend",
                         "aws", "--dry-run", "--endpoint-url", aws_env["endpoint_url"]),
                    "stack 'no-such-stack' does not exist in this region")


def test_launch_of_a_stack_missing_an_output_is_one_line(
    aws_env: dict[str, str], plan_file: Path
) -> None:
    """A stack of another template: every output but RedisUrl."""
    cfn = client("cloudformation", aws_env)
    name = create(cfn, _deletable(), RedisPassword=PASSWORD,
                  RepositoryName=f"lambdadnn-{uuid.uuid4().hex[:8]}")
    code, out, err = run("launch", str(plan_file), "--stack", name, "--backend", "aws",
                         "--dry-run", "--endpoint-url", aws_env["endpoint_url"])
    cfn.delete_stack(StackName=name)
    assert_one_line(code, out, err, f"stack {name!r} has no output `RedisUrl`")
    assert "`lambdadnn deploy --print`" in err


# -- hostile input, no AWS needed -------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--subnet-ids", "subnet-zz", "--security-group-ids", GROUP],
         "`--subnet-ids` holds 'subnet-zz', which is no ID like subnet-"),
        (["--subnet-ids", SUBNET, "--security-group-ids", "sg-0123"],
         "`--security-group-ids` holds 'sg-0123'"),
        (["--subnet-ids", f"{SUBNET},", "--security-group-ids", GROUP],
         "`--subnet-ids` holds ''"),
        (["--subnet-ids", GROUP, "--security-group-ids", SUBNET], "`--subnet-ids` holds 'sg-"),
        (["--subnet-ids", ",".join([SUBNET] * 17), "--security-group-ids", GROUP],
         "`--subnet-ids` holds 17 IDs; a Lambda function takes at most 16"),
        (["--subnet-ids", SUBNET], "`--subnet-ids` without `--security-group-ids`"),
        (["--security-group-ids", GROUP], "`--security-group-ids` without `--subnet-ids`"),
        (["--stack", "../etc"], "`--stack` '../etc' is no CloudFormation stack name"),
    ],
)
def test_bad_vpc_options_are_one_line_before_any_call(
    extra: list[str], fragment: str, plan_file: Path
) -> None:
    """No endpoint answers at 127.0.0.1:9: a call would fail otherwise."""
    assert_one_line(*run("launch", str(plan_file), "--backend", "aws", "--role-arn", ROLE,
                         "--dry-run", "--endpoint-url", "http://127.0.0.1:9", *extra), fragment)


def test_vpc_options_of_a_local_launch_are_one_line(plan_file: Path) -> None:
    assert_one_line(*run("launch", str(plan_file), "--subnet-ids", SUBNET,
                         "--security-group-ids", GROUP), "use them with `--backend aws`")


def test_a_stack_behind_no_endpoint_is_one_line(plan_file: Path) -> None:
    """Nothing answers at 127.0.0.1:9: botocore's connection error, not a traceback."""
    with pytest.MonkeyPatch.context() as patch:
        _dummy_aws(patch)
        patch.setenv("AWS_MAX_ATTEMPTS", "1")
        assert_one_line(*run("launch", str(plan_file), "--stack", "lambdadnn", "--backend",
                             "aws", "--dry-run", "--endpoint-url", "http://127.0.0.1:9"),
                        "reading stack 'lambdadnn' failed: Could not connect to the endpoint")


def test_a_launch_without_an_image_is_refused_in_one_line(plan_file: Path) -> None:
    assert_one_line(*run("launch", str(plan_file), "--backend", "aws", "--role-arn", ROLE,
                         "--redis-url", "redis://10.0.0.9:6379/0"),
                    "`--image-uri` is needed for the aws backend: the worker imports torch")


def test_the_vpc_ids_reach_the_policy_and_the_target() -> None:
    target = AwsTarget("lambdadnn-worker", ROLE, subnet_ids=(SUBNET,),
                       security_group_ids=(GROUP,))
    actions = {a for s in required_policy(target)["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcs"} <= actions
    outside = required_policy(AwsTarget("lambdadnn-worker", ROLE))
    assert "ec2:DescribeSubnets" not in json.dumps(outside)
    with pytest.raises(AwsLaunchError, match="without"):
        AwsTarget("lambdadnn-worker", ROLE, subnet_ids=(SUBNET,))


class _Stacks:
    """A CloudFormation client that answers describe_stacks with `answer` (or raises it)."""

    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer

    def describe_stacks(self, **_params: Any) -> dict[str, Any]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _refused(answer: dict[str, Any] | Exception) -> str:
    with pytest.raises(StackError) as refused:
        stack_outputs(_Stacks(answer), "lambdadnn")
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_stack_errors_name_the_stack_the_cause_and_the_fix() -> None:
    assert "needs AWS credentials and found none" in _refused(NoCredentialsError())
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "DescribeStacks")
    assert "grant the caller cloudformation:DescribeStacks" in _refused(denied)
    rolled_back = {"Stacks": [{"StackStatus": "ROLLBACK_COMPLETE", "Outputs": []}]}
    assert "stack 'lambdadnn' is ROLLBACK_COMPLETE, not deployed" in _refused(rolled_back)
    complete = {"StackStatus": "CREATE_COMPLETE", "Outputs": [
        {"OutputKey": key, "OutputValue": "x"} for key in OUTPUTS if key != "SubnetIds"]}
    assert "has no output `SubnetIds`" in _refused({"Stacks": [complete]})
